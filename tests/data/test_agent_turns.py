"""One agent SFT row per assistant turn, with the history before it; broken demos named by file and line."""

import pytest

from tests.conftest import write_lines
from textwm.data.agent_turns import agent_turn_rows
from textwm.data.jsonl import DataError, read_jsonl


def _demo(*turns):
    messages = [{"role": "system", "content": "act"}, {"role": "user", "content": "Task: boil water"}]
    for action, observation in turns:
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
    return {"messages": messages, "task_id": "boil_v0"}


def test_every_assistant_turn_becomes_a_row_with_its_history(tmp_path):
    path = write_lines(tmp_path / "sft.jsonl", [_demo(("look around", "a stove"), ("focus on water", "done")),
                                                _demo(("inventory", "nothing"))])
    rows = agent_turn_rows(read_jsonl(path))
    assert [r["messages"][-1]["content"] for r in rows] == ["look around", "focus on water", "inventory"]
    assert [len(r["messages"]) for r in rows] == [3, 5, 3]
    assert rows[1]["messages"][3] == {"role": "user", "content": "a stove"}     # the observation it acted on


@pytest.mark.parametrize(("bad", "message"), [({"task_id": "x"}, ":2: messages: an agent demo needs a list"),
                                              ({"messages": [{"role": "user", "content": "hi"}]},
                                               ":2: messages: the demo has no assistant turn")])
def test_a_demo_that_teaches_nothing_is_named(tmp_path, bad, message):
    path = write_lines(tmp_path / "sft.jsonl", [_demo(("look", "ok")), bad])
    with pytest.raises(DataError, match=f"sft.jsonl{message}"):
        agent_turn_rows(read_jsonl(path))
