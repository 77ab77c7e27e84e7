import json

import pytest

from textwm.data.jsonl import DataError
from textwm.envs.registry import get_env
from textwm.envs.task_types import rows_of_types, write_rows_of_types


def _rows(*task_ids):
    return [{"task_id": t, "messages": []} for t in task_ids]


def test_rows_grouped_in_the_order_of_the_types_asked():
    rows = _rows("boil_v0", "lifespan-longest-lived_v1", "melt_v2", "lifespan-longest-lived_v3")
    kept = rows_of_types(get_env("sciworld"), rows, ["lifespan-longest-lived", "boil"], source="rl.jsonl")
    assert [r["task_id"] for r in kept] == ["lifespan-longest-lived_v1", "lifespan-longest-lived_v3", "boil_v0"]


def test_a_type_with_no_row_is_refused_naming_the_types_present():
    with pytest.raises(DataError, match=r"rl.jsonl: no row of task type freeze \(its task types: boil, melt\)"):
        rows_of_types(get_env("sciworld"), _rows("boil_v0", "melt_v1"), ["boil", "freeze"], source="rl.jsonl")


def test_a_row_without_task_id_is_refused_with_its_line(tmp_path):
    source = tmp_path / "rl.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in [*_rows("boil_v0"), {"messages": []}]))
    with pytest.raises(DataError, match=r"rl.jsonl:2: task_id: row has no string 'task_id'"):
        write_rows_of_types(get_env("sciworld"), source, tmp_path / "out.jsonl", ["boil"])
    assert not (tmp_path / "out.jsonl").exists()   # nothing half-written


def test_the_agent_files_of_a_dataset_folder_keep_those_types(tmp_path):
    from textwm.envs.task_types import AGENT_FILES, write_agent_files

    for name in AGENT_FILES:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in _rows("boil_v0", "melt_v1", "boil_v2")))
    counts = write_agent_files(get_env("sciworld"), tmp_path, tmp_path / "agent", ["boil"])
    assert counts == {name: 2 for name in AGENT_FILES}
    assert [json.loads(line)["task_id"] for line in (tmp_path / "agent" / "rl_test.jsonl").read_text().splitlines()] \
        == ["boil_v0", "boil_v2"]
