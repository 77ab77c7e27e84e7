import json

import pytest

from tests.conftest import chat, run_script, write_lines
from textwm.data.converters import (
    LLAMAFACTORY_TAGS,
    convert_file,
    register_llamafactory_dataset,
    to_llamafactory,
    to_message_array,
    to_swift,
)
from textwm.data.jsonl import DataError, read_jsonl
from textwm.data.schema import validate_row


def _rows():
    a = chat(answer='{"b": 2, "a": 1}')
    b = {**chat(system="wm", answer="multi\nline ünïcode"), "task_id": "boil_v3"}
    b["messages"] = json.dumps(b["messages"])  # the paper's JSON-string encoding
    return [a, b]


@pytest.mark.parametrize("fmt", ["llamafactory", "array", "swift"])
def test_round_trip_preserves_messages(tmp_path, fmt):
    src = write_lines(tmp_path / "in.jsonl", _rows())
    out = tmp_path / "out" / "train.jsonl"
    report = convert_file(src, out, fmt=fmt)
    assert (report.rows_in, report.rows_out, report.skipped) == (2, 2, [])
    back = [validate_row(r)["messages"] for r in read_jsonl(out).rows]
    assert back == [validate_row(r)["messages"] for r in _rows()]
    first_line = json.loads(out.read_text().splitlines()[0])
    assert isinstance(first_line, list if fmt == "array" else dict)


def test_converters_keep_only_what_each_format_carries():
    row = {**validate_row(_rows()[1]), "task_id": "boil_v3"}
    row["messages"][0]["loss"] = False
    assert set(to_llamafactory(row)) == {"messages"}
    assert all(set(m) == {"role", "content"} for m in to_message_array(row))
    swift = to_swift(row)
    assert swift["task_id"] == "boil_v3" and set(swift["messages"][0]) == {"role", "content"}


def test_llamafactory_registers_dataset_info(tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"other": {"file_name": "o.jsonl"}}))
    src = write_lines(tmp_path / "in.jsonl", _rows())
    report = convert_file(src, tmp_path / "wm_train.jsonl", fmt="llamafactory", dataset_name="wm")
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert info["other"] == {"file_name": "o.jsonl"}  # existing entries kept
    assert info["wm"] == {"file_name": "wm_train.jsonl", "formatting": "sharegpt",
                          "columns": {"messages": "messages"}, "tags": LLAMAFACTORY_TAGS}
    assert report.dataset_info == str(tmp_path / "dataset_info.json")


def test_bad_dataset_info_is_named(tmp_path):
    (tmp_path / "dataset_info.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="dataset_info.json: must be a JSON object"):
        register_llamafactory_dataset(tmp_path, "x", "x.jsonl")


def test_passthrough_accepts_arrays_only(tmp_path):
    arrays = write_lines(tmp_path / "arr.jsonl", [chat()["messages"], chat(answer="b")["messages"]])
    assert convert_file(arrays, tmp_path / "o.jsonl", fmt="array", passthrough=True).rows_out == 2
    objects = write_lines(tmp_path / "obj.jsonl", [chat()])
    with pytest.raises(DataError, match=r"obj\.jsonl:1: --passthrough expects each row to be a JSON array"):
        convert_file(objects, tmp_path / "o2.jsonl", fmt="array", passthrough=True)
    assert not (tmp_path / "o2.jsonl").exists()


BAD_INPUTS = {
    "truncated": ('{"messages": [{"role": "user", "content": "hi"}', r":2: invalid JSON"),
    "missing_messages": ('{"prompt": "hi"}', r":2: messages: row has no 'messages' field"),
    "wrong_role": (json.dumps({"messages": [{"role": "bot", "content": "x"}]}), r":2: messages\[0\]\.role: is 'bot'"),
    "no_target": (json.dumps({"messages": [{"role": "user", "content": "x"}]}), r":2: messages\[0\]\.role: last message"),
    "non_utf8": (b'{"messages": "\xc3\x28"}', r":2: not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_with_location_and_writes_nothing(tmp_path, case):
    bad, match = BAD_INPUTS[case]
    src = write_lines(tmp_path / "in.jsonl", [chat(), bad, chat()])
    out = tmp_path / "out" / "train.jsonl"
    with pytest.raises(DataError, match=match):
        convert_file(src, out, fmt="array")
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_skip_mode_counts_bad_rows(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [chat(), "garbage", chat(), '{"x": 1}'])
    report = convert_file(src, tmp_path / "o.jsonl", fmt="swift", on_error="skip")
    assert (report.rows_in, report.rows_out, len(report.skipped)) == (4, 2, 2)
    assert "2 skipped" in report.summary()


def test_prepare_data_cli_bad_input_and_empty_file(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [chat(), '{"messages": [{"role": "user", "con'])
    out = tmp_path / "train.jsonl"
    res = run_script("sdar/prepare_data.py", "--input", str(src), "--output", str(out))
    assert res.returncode == 2
    assert f"{src}:2: invalid JSON" in res.stderr
    assert not out.exists() and not (tmp_path / "dataset_info.json").exists()

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = run_script("wedlm/prepare_data.py", "--input", str(empty), "--output", str(out))
    assert res.returncode == 2 and "file is empty" in res.stderr and not out.exists()


def test_prepare_data_cli_oversized_row(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(chat()) + "\n" + json.dumps(chat(answer="y" * (50 << 20))) + "\n")
    out = tmp_path / "train.jsonl"
    res = run_script("wedlm/prepare_data.py", "--input", str(src), "--output", str(out))
    assert res.returncode == 2 and f"{src}:2: line longer than" in res.stderr
    assert not out.exists()


def test_prepare_data_cli_success(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", _rows())
    res = run_script("sdar/prepare_data.py", "--input", str(src), "--output", str(tmp_path / "lf" / "wm.jsonl"))
    assert res.returncode == 0, res.stderr
    assert "2 row(s) read, 2 written" in res.stdout
    assert json.loads((tmp_path / "lf" / "dataset_info.json").read_text())["wm"]["file_name"] == "wm.jsonl"
