"""AppWorld's tools: every public app API, named ``app__api``, with its JSON schema, read from the apps' own code.

``api_specs.json`` (package data) is written by AppWorld's interpreter from the installed apps' FastAPI
routes (``python -m textwm.envs.appworld.apps_python --write-specs``): 457 APIs of 11 apps, each with its
HTTP method, path, description, parameters (type, required, default, constraints; ``access_token`` hidden
from the agent: the env injects it) and response schemas. Nothing here is hand-written.

* :func:`catalog` — the tools by name; :meth:`Tool.json_schema` (OpenAI function schema),
  :meth:`Tool.signature` (the rows' ``- name(p1, p2)`` lines), :meth:`Tool.changes_state` (not a GET);
* :func:`unknown_tool_error`, :func:`missing_arguments_error` — the errors the real app gives for an unknown app
  or API, or a call whose required arguments are missing, exactly as AppWorld words them (``None``: none);
* :data:`PAPER_NAME_MAP` / :data:`PAPER_PARAM_RENAMES` — the paper's fixes of names its early data used
  (``fix_tool_names_and_schemas.py``), applied by :mod:`textwm.envs.appworld.fix_tools`.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

SPECS_FILE = "api_specs.json"
#: AppWorld's JSON types -> JSON-schema types (``list[string]`` -> array of strings).
_SCHEMA_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}

#: Old tool names of the paper's early data -> the real API names (the paper's ``NAME_MAP``).
PAPER_NAME_MAP: dict[str, str] = {
    "spotify__show_playlists": "spotify__show_playlist_library",
    "spotify__show_playlist_songs": "spotify__show_playlist",
    "venmo__show_pending_requests": "venmo__show_received_payment_requests",
    "venmo__send_payment": "venmo__create_transaction",
    "venmo__accept_payment_request": "venmo__approve_payment_request",
    "venmo__add_comment": "venmo__create_transaction_comment",
    "venmo__send_reminder": "venmo__remind_payment_request",
    "phone__show_text_messages": "phone__search_text_messages",
    "phone__show_voice_messages": "phone__search_voice_messages",
    "file_system__read_file": "file_system__show_file",
    "simple_note__show_notes": "simple_note__search_notes",
}
#: Old parameter names per (real) tool -> the real ones (the paper lists them but never applies them).
PAPER_PARAM_RENAMES: dict[str, dict[str, str]] = {
    "venmo__create_transaction": {"recipient_username": "receiver_email", "note": "description"},
    "venmo__approve_payment_request": {"request_id": "payment_request_id"},
    "venmo__create_transaction_comment": {"text": "comment"},
    "venmo__remind_payment_request": {"request_id": "payment_request_id"},
    "phone__send_text_message": {"recipient": "phone_number", "text": "message"},
}


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    required: bool
    default: Any
    description: str
    constraints: tuple[str, ...] = ()

    def json_schema(self) -> dict[str, Any]:
        if self.type.startswith("list["):
            item = _SCHEMA_TYPES.get(self.type[5:-1], "string")
            schema: dict[str, Any] = {"type": "array", "items": {"type": item}}
        elif "|" in self.type:
            schema = {"type": [_SCHEMA_TYPES.get(t.strip(), "string") for t in self.type.split("|")]}
        else:
            schema = {"type": _SCHEMA_TYPES.get(self.type, "string")}
        if self.description:
            schema["description"] = self.description
        if not self.required and self.default is not None:
            schema["default"] = self.default
        return schema

    def accepts(self, value: Any) -> bool | None:
        """Whether the app's validation surely passes (True) or surely refuses (False) ``value``; None where it
        cannot be told here (a value of another JSON type, which pydantic may coerce, or a check not stated in
        :attr:`constraints`: an email address, a list's items).

        Read from the declared type and :attr:`constraints` (``value >= 1.0, <= 20.0``, ``length >= 1``,
        ``value in ['a', 'b']``): one check that fails refuses the value, whatever the others say."""
        if not _typed_as(self.type, value):
            return None
        verdicts = [_holds(c, value) for c in self.constraints]
        if False in verdicts:
            return False
        return None if None in verdicts else True


_COMPARE = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def _typed_as(declared: str, value: Any) -> bool:
    """``value`` is a JSON value of the parameter's declared type as it is (no coercion needed)."""
    if isinstance(value, bool):
        return declared == "boolean"
    if declared == "integer":
        return isinstance(value, int)
    if declared == "number":
        return isinstance(value, (int, float))
    return declared == "string" and isinstance(value, str)


def _holds(constraint: str, value: Any) -> bool | None:
    """One stated check on ``value`` (of its declared type): True, False, or None when it is not one read here."""
    subject, _, rule = constraint.partition(" ")
    if subject == "value" and rule.startswith("in ["):
        try:
            return value in ast.literal_eval(rule[len("in "):])
        except (ValueError, SyntaxError):
            return None
    if subject == "length" and isinstance(value, str):
        measured: Any = len(value)
    elif subject == "value" and not isinstance(value, str):
        measured = value
    else:
        return None
    verdict: bool | None = True
    for part in rule.split(","):
        op, _, bound = part.strip().partition(" ")
        try:
            limit = float(bound)
        except ValueError:
            verdict = None
            continue
        if op not in _COMPARE:
            verdict = None
        elif not _COMPARE[op](measured, limit):
            return False
    return verdict


@dataclass(frozen=True)
class Tool:
    """One app API as the agent sees it."""

    name: str
    app: str
    api: str
    method: str
    path: str
    description: str
    #: The parameters the agent passes (``access_token`` excluded).
    params: tuple[Param, ...]
    requires_access_token: bool
    #: The success response's schema (an example value), from the app's response model.
    returns: Any = None

    @property
    def changes_state(self) -> bool:
        return self.method.upper() != "GET"

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def signature(self) -> str:
        """``spotify__login(username, password)`` (the paper's rows' ``Available tools:`` lines)."""
        names = ", ".join(p.name for p in self.params) or "no parameters"
        return f"{self.name}({names})"

    def json_schema(self) -> dict[str, Any]:
        """An OpenAI-style function schema (``tools=[{"type": "function", "function": ...}]``)."""
        return {"name": self.name, "description": self.description,
                "parameters": {"type": "object", "properties": {p.name: p.json_schema() for p in self.params},
                               "required": [p.name for p in self.params if p.required]}}

    def short_schema(self) -> dict[str, Any]:
        """``{"name", "parameters": {p: {"type"}}}``: the form of the paper's ``<|tool|>[...]<|/tool|>`` lists."""
        return {"name": self.name, "parameters": {p.name: {"type": p.json_schema()["type"]} for p in self.params}}


def _tool(spec: dict[str, Any]) -> Tool:
    params = tuple(Param(p["name"], p["type"], bool(p["required"]), p.get("default"), p.get("description") or "",
                         tuple(p.get("constraints") or ())) for p in spec["parameters"] if not p["hidden_from_agent"])
    returns = (spec.get("response_schemas") or {}).get("success")
    return Tool(spec["name"], spec["app"], spec["api_name"], spec["method"], spec["path"], spec.get("description", ""),
                params, bool(spec["requires_access_token"]), returns)


@lru_cache(maxsize=1)
def catalog() -> dict[str, Tool]:
    """Every public API by ``app__api`` name (loaded once from the package's ``api_specs.json``)."""
    text = resources.files("textwm.envs.appworld").joinpath(SPECS_FILE).read_text(encoding="utf-8")
    return {spec["name"]: _tool(spec) for spec in json.loads(text)}


def apps() -> list[str]:
    return sorted({t.app for t in catalog().values()})


def tools_of(app_names: list[str] | tuple[str, ...]) -> list[Tool]:
    return [t for t in catalog().values() if t.app in app_names]


def split_name(name: str) -> tuple[str, str]:
    """``spotify__login`` -> ``("spotify", "login")`` (no ``__``: the app is empty)."""
    app, sep, api = name.partition("__")
    return (app, api) if sep else ("", name)


def error_response(message: str) -> str:
    """The agent-visible text of a failed call: ``{"error": "..."}``."""
    return json.dumps({"error": message})


def http_error(status: int, message: str) -> str:
    """A failed call as AppWorld's requester reports an HTTP error (``Response status code is 401:\\n{...}``)."""
    body = json.dumps({"message": message}, separators=(",", ":"))
    return error_response(f"Response status code is {status}:\n{body}")


def unknown_tool_error(name: str) -> str | None:
    """AppWorld's error for a name that is no API (None: it is one)."""
    if name in catalog():
        return None
    if "__" not in name:
        return error_response(f"Invalid API name {name!r}: expected '<app_name>__<api_name>'.")
    app, api = split_name(name)
    if app not in apps():
        return error_response(f"No app named '{app}' found.")
    return error_response(f"No API named '{api}' found in the {app} app.")


def missing_arguments_error(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """The 422 of a call that lacks required arguments (None: all there).

    Path parameters fail pydantic's integer check (the ``{id}`` stays in the URL, as in AppWorld); body and
    query parameters report ``field required``; the reasons are listed in the parameters' order.
    """
    reasons = []
    for p in tool.params:
        if p.required and arguments.get(p.name) is None:
            in_path = "{" + p.name + "}" in tool.path
            if in_path and p.type != "integer":
                return None  # the literal "{name}" passes as a string path value: what follows is the app's
            reasons.append(f"{p.name}: {'value is not a valid integer' if in_path else 'field required'}")
    if not reasons:
        return None
    return http_error(422, "Validation error. Reason: \n" + "\n".join(reasons))
