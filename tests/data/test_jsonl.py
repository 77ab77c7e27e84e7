import json
import os

import pytest

from tests.conftest import chat, write_lines
from textwm.data.jsonl import DataError, atomic_write, iter_jsonl, read_json, read_jsonl, write_jsonl
from textwm.data.schema import validate_target_row


def test_reads_rows_with_line_numbers_and_skips_blank_lines(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [chat(answer="one"), "", "   ", chat(answer="two")])
    report = read_jsonl(path, validate=validate_target_row)
    assert [r["messages"][-1]["content"] for r in report.rows] == ["one", "two"]
    assert report.line_numbers == [1, 4]


def test_truncated_line_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [chat(), '{"messages": [{"role": "user", "cont'])
    with pytest.raises(DataError) as err:
        read_jsonl(path)
    assert str(err.value).startswith(f"{path}:2: invalid JSON")
    assert "truncated" in str(err.value)


def test_non_utf8_bytes_name_file_and_line(tmp_path):
    path = write_lines(tmp_path / "b.jsonl", [chat(), b'{"messages": "\xff\xfe"}'])
    with pytest.raises(DataError, match=r"b\.jsonl:2: not valid UTF-8 \(byte 14"):
        read_jsonl(path)


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(DataError, match=r"empty\.jsonl: file is empty"):
        read_jsonl(path)
    assert read_jsonl(path, allow_empty=True).rows == []


def test_oversized_row_is_rejected_without_loading_it(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(chat()) + "\n")
        f.write(json.dumps(chat(answer="x" * (50 * 1024 * 1024))) + "\n")  # a 50 MB row
        f.write(json.dumps(chat(answer="after")) + "\n")
    with pytest.raises(DataError, match=r"big\.jsonl:2: line longer than 16,777,216 bytes"):
        read_jsonl(path)
    report = read_jsonl(path, on_error="skip")
    assert [r["messages"][-1]["content"] for r in report.rows] == ["You see a room.", "after"]
    assert report.line_numbers == [1, 3]


def test_skip_mode_counts_every_bad_row(tmp_path, caplog):
    path = write_lines(tmp_path / "m.jsonl", [chat(), {"text": "no messages"}, "not json", chat()])
    report = read_jsonl(path, validate=validate_target_row, on_error="skip")
    assert len(report.rows) == 2
    assert [e.line for e in report.skipped] == [2, 3]
    assert "skipped 2 bad row(s) of 4" in caplog.text


def test_all_rows_bad_is_an_error_even_when_skipping(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", ["nope", "[1, 2"])
    with pytest.raises(DataError, match="no valid rows: all 2 row"):
        read_jsonl(path, on_error="skip")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        list(iter_jsonl(tmp_path / "nope.jsonl"))


def test_atomic_write_leaves_old_file_on_crash(tmp_path):
    path = tmp_path / "out.jsonl"
    write_jsonl(path, [{"a": 1}])

    def rows():
        yield {"a": 2}
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert path.read_text() == '{"a": 1}\n'
    assert os.listdir(tmp_path) == ["out.jsonl"]  # no temporary file left behind


def test_atomic_write_creates_parents_and_is_readable(tmp_path):
    path = tmp_path / "deep" / "er" / "x.txt"
    with atomic_write(path) as f:
        f.write("hello")
    assert path.read_text() == "hello"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_read_json_error_has_line(tmp_path):
    path = tmp_path / "info.json"
    path.write_text('{\n  "a": 1,\n  "b": \n}')
    with pytest.raises(DataError, match=r"info\.json:4: invalid JSON"):
        read_json(path)


def test_a_file_set_replaces_the_earlier_set_whole_or_not_at_all(tmp_path):
    from textwm.data.jsonl import PARTIAL_DIR, write_file_set, write_jsonl

    replaces = ["rows_*.jsonl", "card.json"]
    write_file_set(tmp_path, {"rows_train.jsonl": lambda p: write_jsonl(p, [1]),
                              "rows_test.jsonl": lambda p: write_jsonl(p, [2]), "card.json": lambda p: p.write_text("1")},
                   replaces=replaces)
    # A second run without a test split: the earlier test file does not stay beside the new set.
    write_file_set(tmp_path, {"rows_train.jsonl": lambda p: write_jsonl(p, [3]), "card.json": lambda p: p.write_text("2")},
                   replaces=replaces)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json", "rows_train.jsonl"]
    assert (tmp_path / "card.json").read_text() == "2"

    def interrupted(path):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file_set(tmp_path, {"rows_train.jsonl": lambda p: write_jsonl(p, [4]), "card.json": interrupted},
                       replaces=replaces)
    assert (tmp_path / "card.json").read_text() == "2" and (tmp_path / "rows_train.jsonl").read_text() == "3\n"
    assert (tmp_path / PARTIAL_DIR).is_dir()                          # left for the next run to clear
    write_file_set(tmp_path, {"card.json": lambda p: p.write_text("3")}, replaces=replaces)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json"]
