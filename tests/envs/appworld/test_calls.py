"""Tool-call parsing over hand-written replies in every backbone's form, broken JSON included."""

from __future__ import annotations

import json

import pytest

from textwm.envs.appworld import agent
from textwm.envs.appworld.calls import ParseError, parse_tool_call

LOGIN = ("spotify__login", {"username": "a@b.com", "password": "p"})

FORMS = [
    ('[{"name": "spotify__login", "parameters": {"username": "a@b.com", "password": "p"}}]', "json", False),
    ('{"name": "spotify__login", "arguments": {"username": "a@b.com", "password": "p"}}', "json", False),
    ('<think>log in first</think>\n<tool_call>\n{"name": "spotify__login", "arguments": '
     '{"username": "a@b.com", "password": "p"}}\n</tool_call>', "hermes", False),
    ('[TOOL_CALLS][{"name": "spotify__login", "arguments": {"username": "a@b.com", "password": "p"}}]', "mistral",
     False),
    ('[TOOL_CALLS]spotify__login[ARGS]{"username": "a@b.com", "password": "p"}', "mistral", False),
    ('<|tool_call_start|>[spotify__login(username="a@b.com", password="p")]<|tool_call_end|>', "pythonic", False),
    ('spotify__login(username="a@b.com", password="p")', "pythonic", False),
    ('```json\n[{"name": "spotify__login", "parameters": {"username": "a@b.com", "password": "p"}}]\n```', "json",
     False),
    ('{"type": "function", "function": {"name": "spotify__login", "arguments": '
     '"{\\"username\\": \\"a@b.com\\", \\"password\\": \\"p\\"}"}}', "json", False),
    # broken JSON the parser repairs
    ("[{'name': 'spotify__login', 'parameters': {'username': 'a@b.com', 'password': 'p'}}]", "json", True),
    ('[{"name": "spotify__login", "parameters": {"username": "a@b.com", "password": "p",},}]', "json", True),
    ('[{"name": "spotify__login", "parameters": {"username": "a@b.com", "password": "p"', "json", True),
    ('<tool_call>{"name": "spotify__login", "arguments": {"username": "a@b.com", "password": "p"}', "hermes", True),
]


@pytest.mark.parametrize(("reply", "form", "repaired"), FORMS)
def test_every_form_gives_the_same_call(reply, form, repaired):
    call = parse_tool_call(reply)
    assert (call.name, call.arguments) == LOGIN
    assert call.form == form and call.repaired is repaired


def test_python_literals_and_extra_calls():
    call = parse_tool_call('[{"name": "x__y", "parameters": {"a": True, "b": None}}, {"name": "z__w"}]')
    assert call.arguments == {"a": True, "b": None} and call.extra_calls == 1


@pytest.mark.parametrize(("reply", "says"), [
    ("", "empty"), ("I will now log in to Spotify.", "no JSON tool call"), ("[]", "empty"),
    ('[{"parameters": {}}]', "no valid 'name'"), ('[{"name": "x__y", "parameters": [1, 2]}]', "JSON object"),
    ("[{name: x}", "could not be repaired"), ("spotify__login('a', 'b')", "by name"),
])
def test_unparseable_replies_say_why(reply, says):
    with pytest.raises(ParseError, match=says):
        parse_tool_call(reply)


def test_the_action_is_canonical_and_hides_the_token():
    action = agent.parse_action('<tool_call>{"name": "spotify__show_song_library", "arguments": '
                                '{"page_index": 0, "access_token": "abc"}}</tool_call>')
    assert json.loads(action) == [{"name": "spotify__show_song_library", "parameters": {"page_index": 0}}]
    assert agent.parse_action("no call here") is None
