import pytest

from textwm.data.text import canonical_json, extract_output_field, normalize, strip_tags


@pytest.mark.parametrize(("raw", "clean"), [
    ("<think>plan: open door</think>The door is now open.", "The door is now open."),
    ("<think>a</think>x<think>b\nc</think>y", "xy"),                                   # every think block
    ("noise <tool_response> {\"ok\": true} </tool_response> tail", '{"ok": true}'),    # inside of the wrapper
    ("<tool_response>inner", "inner"),                                                   # stray tag dropped
    ("answer</think>", "answer"),
    ("  \n padded \t", "padded"),
    ("<think>only thinking</think>", ""),
])
def test_strip_tags(raw, clean):
    assert strip_tags(raw) == clean


@pytest.mark.parametrize(("raw", "clean"), [
    ('{"b": 2, "a": [1, {"d": 0, "c": 1}]}', '{"a":[1,{"c":1,"d":0}],"b":2}'),  # sorted keys, compact
    ('{"name": "café"}', '{"name":"café"}'),                                      # non-ASCII kept
    ("[1, 2]", "[1,2]"),
    ("not json {", "not json {"),
    ("  plain text  ", "plain text"),
])
def test_canonical_json(raw, clean):
    assert canonical_json(raw) == clean


def test_normalize_applies_all_rules_in_order():
    raw = '<think>x</think> <tool_response>{"b": 1,\n "a": 2}</tool_response>'
    assert normalize(raw) == '{"a":2,"b":1}'


def test_extract_output_field():
    ref = '{"api_name": "Search", "input": {"q": 1}, "output": {"r": [1]}, "exception": null}'
    assert extract_output_field(ref) == '{"exception":null,"output":{"r":[1]}}'
    assert extract_output_field('{"api_name": "x"}') == '{"api_name": "x"}'  # neither key: text as is
    assert extract_output_field("plain") == "plain"
