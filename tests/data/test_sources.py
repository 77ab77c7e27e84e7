import json

import pytest

from tests.conftest import chat, run_script, write_lines
from textwm.data.jsonl import DataError, read_jsonl
from textwm.data.sources import HubUnreachableError, holdout_split, load_split


def _rows(n):
    return [{**chat(answer=f"obs {i}"), "task_id": f"t{i}"} for i in range(n)]


def test_local_jsonl_file(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", _rows(3))
    loaded = load_split(str(path))
    assert [r["messages"][-1]["content"] for r in loaded.rows] == ["obs 0", "obs 1", "obs 2"]


def test_local_folder_with_splits_via_datasets(tmp_path):
    write_lines(tmp_path / "train.jsonl", _rows(4))
    write_lines(tmp_path / "test.jsonl", _rows(2))
    assert len(load_split(str(tmp_path), split="train").rows) == 4
    test = load_split(str(tmp_path), split="test").rows
    assert test[1]["messages"][-1]["content"] == "obs 1" and test[1]["task_id"] == "t1"


def test_folder_without_messages_column(tmp_path):
    write_lines(tmp_path / "train.jsonl", [{"text": "a"}, {"text": "b"}])
    with pytest.raises(DataError, match="has no 'messages' column"):
        load_split(str(tmp_path))


def test_unreachable_hub_id_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises((HubUnreachableError, DataError), match="(Hub|not found|local file)"):
        load_split("no-such-org/no-such-dataset")


def test_holdout_is_deterministic_and_disjoint():
    rows = _rows(20)
    a_train, a_test = holdout_split(rows, 0.25, seed=3)
    _, b_test = holdout_split(rows, 0.25, seed=3)
    assert a_test == b_test and len(a_test) == 5 and len(a_train) == 15
    assert not {r["task_id"] for r in a_train} & {r["task_id"] for r in a_test}


def test_prepare_data_cli_local_file(tmp_path):
    src = write_lines(tmp_path / "all.jsonl", _rows(10))
    out = tmp_path / "out"
    res = run_script("llm_training/prepare_data.py", "--source", str(src), "--test-size", "0.2",
                     "--out-dir", str(out))
    assert res.returncode == 0, res.stderr
    train, test = read_jsonl(out / "train.jsonl").rows, read_jsonl(out / "test.jsonl").rows
    assert (len(train), len(test)) == (8, 2)
    assert isinstance(train[0]["messages"], list) and "task_id" in train[0]  # ms-swift rows keep extras


def test_prepare_data_cli_offline_hub_id(tmp_path):
    res = run_script("llm_training/prepare_data.py", "--source", "no-such-org/no-such-dataset",
                     "--out-dir", str(tmp_path), env={"HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2
    assert "no-such-org/no-such-dataset" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "train.jsonl").exists()


def test_json_string_messages_from_parquet_like_sources(tmp_path):
    rows = [{"messages": json.dumps(r["messages"])} for r in _rows(2)]
    path = write_lines(tmp_path / "s.json", rows)  # .json goes through `datasets`
    loaded = load_split(str(path))
    assert loaded.rows[0]["messages"][-1]["content"] == "obs 0"
