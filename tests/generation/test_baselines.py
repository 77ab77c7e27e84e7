import pytest

from tests.conftest import chat
from textwm.data.jsonl import DataError
from textwm.generation.baselines import action_lookup, copy_state, state_and_action


def _t(state, action, obs):
    return chat(user=f"State: {state}\n\nAction: {action}", answer=obs)


def test_state_and_action_parse_the_proxy_layout():
    assert state_and_action(_t("in the kitchen\n\nyou see a stove", "open door", "x")) == (
        "in the kitchen\n\nyou see a stove", "open door")
    with pytest.raises(DataError, match="not a WM user message"):
        state_and_action(chat(user="no layout"))


def test_floor_baselines():
    train = [_t("s", "Open Door", "The door is now open."), _t("s", "open door", "The door is now open."),
             _t("s", "open door", "The door is already open.")]
    test = [_t("hall", "open door", "?"), _t("hall", "look around", "?")]
    assert copy_state(test) == ["hall", "hall"]
    assert action_lookup(train, test) == ["The door is now open.", "hall"]  # unseen action -> copy_state
