"""Tool calls in an agent's reply: every output form of the paper's backbones, near-JSON repaired.

Forms read (after ``<think>...</think>`` blocks and markdown code fences are dropped):

* the JSON the paper's rows ask for: ``[{"name": "spotify__login", "parameters": {...}}]`` (a bare object
  too, and ``"arguments"`` for ``"parameters"``, also as a JSON string as OpenAI sends it);
* Qwen3 (Hermes style): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (v3 tokenizer) and
  ``[TOOL_CALLS]name[ARGS]{...}`` (v11+);
* LFM2 / LFM2.5: ``<|tool_call_start|>[spotify__login(username="a", password="b")]<|tool_call_end|>``
  (Python call syntax; also without the markers).

Near-JSON is repaired in this order until it loads: Python literals (``True``/``False``/``None``),
trailing commas, single-quoted strings, missing closing brackets. A reply with several calls yields the
first (the rows ask for one call per turn); :attr:`ToolCall.extra_calls` says how many were dropped.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_LFM = re.compile(r"<\|tool_call_start\|>\s*(.*?)\s*(?:<\|tool_call_end\|>|$)", re.DOTALL)
_MISTRAL_V11 = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*\[ARGS\]\s*(.*)", re.DOTALL)
_MISTRAL = re.compile(r"\[TOOL_CALLS\]\s*(.*)", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
_PY_CALL = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(.*\)\s*\]?$", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool name as written and its arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    #: The output form it was read from (``json``, ``hermes``, ``mistral``, ``pythonic``).
    form: str = "json"
    #: The text needed a repair to load.
    repaired: bool = False
    #: Further calls in the same reply, not executed (the rows ask for one call per turn).
    extra_calls: int = 0

    def canonical(self) -> str:
        """The call in the rows' format: what an SFT demo's assistant turn holds and the WM is shown."""
        return canonical(self.name, self.arguments)


def canonical(name: str, arguments: dict[str, Any] | None = None) -> str:
    """``[{"name": ..., "parameters": {...}}]``: the one text of a call (actions, WM prompts, demos)."""
    return json.dumps([{"name": name, "parameters": arguments or {}}], ensure_ascii=False)


class ParseError(ValueError):
    """A reply holds no readable tool call; the message says what was wrong."""


def parse_tool_call(reply: str) -> ToolCall:
    """The first tool call in ``reply``; :class:`ParseError` saying why when there is none."""
    text = THINK.sub("", reply or "").strip()
    if not text:
        raise ParseError("the reply is empty")
    if fence := _FENCE.search(text):
        text = fence.group(1).strip()
    if m := _MISTRAL_V11.search(text):
        value, repaired = _load(m.group(2))
        return _from_value({"name": m.group(1), "arguments": value}, "mistral", repaired)
    for pattern, form in ((_HERMES, "hermes"), (_LFM, "pythonic"), (_MISTRAL, "mistral")):
        if m := pattern.search(text):
            body = m.group(1).strip()
            if form == "pythonic" or (_PY_CALL.match(body) and not body.lstrip("[").lstrip().startswith("{")):
                return _pythonic(body)
            value, repaired = _load(body)
            return _from_value(value, form, repaired)
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        if _PY_CALL.match(text):
            return _pythonic(text)
        raise ParseError("no JSON tool call in the reply: expected [{\"name\": ..., \"parameters\": {...}}]")
    if _PY_CALL.match(text[start:]) and not text[start:].lstrip("[").lstrip().startswith("{"):
        return _pythonic(text[start:])
    value, repaired = _load(text[start:])
    return _from_value(value, "json", repaired)


def _from_value(value: Any, form: str, repaired: bool) -> ToolCall:
    calls = value if isinstance(value, list) else [value]
    if not calls:
        raise ParseError("the tool call list is empty")
    first = calls[0]
    if not isinstance(first, dict):
        raise ParseError(f"a tool call must be a JSON object with 'name', got {type(first).__name__}")
    if isinstance(first.get("function"), dict):  # OpenAI's {"type": "function", "function": {...}}
        first = first["function"]
    name = first.get("name")
    if not isinstance(name, str) or not _NAME.match(name.strip()):
        raise ParseError(f"the tool call has no valid 'name' (got {name!r})")
    args = first.get("parameters", first.get("arguments", {}))
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        args, more = _load(args) if args.strip() else ({}, False)
        repaired = repaired or more
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ParseError(f"the parameters of {name!r} must be a JSON object, got {type(args).__name__}")
    return _checked(ToolCall(name.strip(), args, form, repaired, len(calls) - 1))


def _checked(call: ToolCall) -> ToolCall:
    """The call, if its arguments are JSON (Python syntax can write sets, complex numbers, ...)."""
    try:
        call.canonical()
    except (TypeError, ValueError):
        raise ParseError(f"the arguments of {call.name!r} are not JSON values: {call.arguments!r:.120}") from None
    return call


def _load(text: str) -> tuple[Any, bool]:
    """The first JSON value in ``text`` (trailing prose ignored), repairing near-JSON; ParseError if none."""
    text = text.strip()
    try:
        return json.JSONDecoder().raw_decode(text)[0], False
    except json.JSONDecodeError:
        pass
    fixed = text
    for repair in (_python_literals, _trailing_commas, _single_quotes, _close_brackets):
        fixed = repair(fixed)
        try:
            return json.JSONDecoder().raw_decode(fixed)[0], True
        except json.JSONDecodeError:
            continue
    try:  # Python dict/list syntax as a last resort (single quotes inside strings, etc.)
        return ast.literal_eval(_close_brackets(text)), True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ParseError(f"the tool call is not valid JSON and could not be repaired: {text[:120]!r}") from None


def _outside_strings(text: str, fn) -> str:
    """Apply ``fn`` to the parts of ``text`` outside double-quoted JSON strings."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(parts))


def _python_literals(text: str) -> str:
    table = {"True": "true", "False": "false", "None": "null"}
    return _outside_strings(text, lambda s: re.sub(r"\b(True|False|None)\b", lambda m: table[m.group(1)], s))


def _trailing_commas(text: str) -> str:
    return _outside_strings(text, lambda s: re.sub(r",\s*([}\]])", r"\1", s))


def _single_quotes(text: str) -> str:
    if '"' in text:
        return text
    return re.sub(r"'((?:[^'\\]|\\.)*)'", lambda m: json.dumps(m.group(1).replace("\\'", "'")), text)


def _close_brackets(text: str) -> str:
    """Append the closing brackets (and quote) a reply cut off at its end is missing."""
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}" and stack:
            stack.pop()
    return text + ('"' if in_string else "") + "".join(reversed(stack))


def _pythonic(text: str) -> ToolCall:
    """``[name(a=1, b="x"), ...]`` or ``name(a=1)`` (LFM2's tool-call syntax)."""
    body = text.strip()
    try:
        tree = ast.parse(body if body.startswith("[") else f"[{body}]", mode="eval").body
    except SyntaxError:
        try:
            tree = ast.parse(_close_brackets(body), mode="eval").body
        except SyntaxError:
            raise ParseError(f"the Python-style tool call does not parse: {body[:120]!r}") from None
    calls = tree.elts if isinstance(tree, ast.List) else [tree]
    if not calls or not isinstance(calls[0], ast.Call):
        raise ParseError(f"expected a call such as name(arg=value), got {body[:120]!r}")
    call = calls[0]
    name = ast.unparse(call.func)
    if call.args:
        raise ParseError(f"{name}: pass arguments by name (name=value), not by position")
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (ValueError, TypeError):
        raise ParseError(f"{name}: argument values must be literals (strings, numbers, lists, ...)") from None
    return _checked(ToolCall(name, args, "pythonic", False, len(calls) - 1))
