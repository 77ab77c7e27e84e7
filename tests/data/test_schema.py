import json

import pytest

from tests.conftest import chat
from textwm.data.jsonl import DataError
from textwm.data.schema import parse_messages, split_prompt_target, validate_row


def test_messages_as_list_or_json_string_are_equivalent():
    row = chat()
    encoded = {**row, "messages": json.dumps(row["messages"]), "task_id": "boil_v1"}
    a, b = validate_row(row), validate_row(encoded)
    assert a["messages"] == b["messages"]
    assert b["task_id"] == "boil_v1"  # extra fields kept


def test_bare_array_is_a_row():
    assert validate_row(chat()["messages"]) == {"messages": chat()["messages"]}


def test_missing_messages_lists_fields_present():
    with pytest.raises(DataError, match=r"messages: row has no 'messages' field \(fields present: prompt, text\)"):
        validate_row({"text": "x", "prompt": "y"})


def test_wrong_role_names_the_field():
    msgs = chat()["messages"]
    msgs[1] = {"role": "human", "content": "hi"}
    with pytest.raises(DataError, match=r"messages\[1\]\.role: is 'human'; expected one of system, user"):
        validate_row({"messages": msgs})


@pytest.mark.parametrize(("messages", "match"), [
    ([], "is empty"),
    ("not json", "is a string but not a JSON list"),
    ({"role": "user"}, "must be a list of messages, got dict"),
    ([["user", "hi"]], r"messages\[0\]: must be an object"),
    ([{"content": "hi"}], r"messages\[0\]: missing 'role'"),
    ([{"role": "user"}], r"messages\[0\]: missing 'content'"),
    ([{"role": "user", "content": 3}], r"messages\[0\]\.content: must be a string, got int"),
])
def test_malformed_messages(messages, match):
    with pytest.raises(DataError, match=match):
        parse_messages(messages)


def test_require_target():
    row = {"messages": chat()["messages"][:2]}
    validate_row(row)  # RL task rows end with the user turn: fine without require_target
    with pytest.raises(DataError, match=r"messages\[1\]\.role: last message has role 'user'"):
        validate_row(row, require_target=True)


def test_split_prompt_target():
    prompt, target = split_prompt_target(validate_row(chat(answer="obs")))
    assert target == "obs"
    assert [m["role"] for m in prompt] == ["system", "user"]
