"""The agent side of AppWorld: its prompt, how a tool call is read from a reply, the turn format.

Turns follow the paper's rows: the agent answers with one tool call, ``[{"name": "app__api",
"parameters": {...}}]`` (other backbones' forms are read too, :mod:`~textwm.envs.appworld.calls`), and the
next user message is the response, ``<tool_response>\\n<json>\\n</tool_response>``. An action is the call in
canonical form (:meth:`ToolCall.canonical`), with any ``access_token`` the agent passed taken out (the env
holds the tokens).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from textwm.envs.appworld.calls import ParseError, ToolCall, parse_tool_call
from textwm.envs.appworld.tools import Tool

log = logging.getLogger(__name__)

AGENT_SYSTEM_PROMPT = """\
You are an AI assistant that completes tasks for a user across their apps (Spotify, Venmo, Simple Note,
File System, Phone, ...) by calling the apps' APIs. Reply with exactly one tool call and no prose.

Workflow:
1. Call supervisor__show_account_passwords to get the user's credentials.
2. Log in to each app the task needs with those credentials (app__login).
3. Do the task with concrete argument values taken from earlier responses.
4. Finish by calling supervisor__complete_task; pass "answer" when the task asks a question.

Format: a JSON array with one call, [{"name": "tool_name", "parameters": {"param": "value"}}], without
markdown or tags. Never pass access_token (the environment handles it) or placeholder values. List
endpoints are paged: pass page_limit=20 and raise page_index until a page comes back empty."""

DEFAULT_MAX_TURNS = 30
TOOL_LIST_HEADER = "Available tools:"
HIDDEN_ARGUMENTS = ("access_token",)


def system_prompt(tools: Iterable[Tool]) -> str:
    """The agent's system prompt with the ``Available tools:`` lines of ``tools``."""
    lines = "\n".join(f"- {t.signature()}" for t in tools)
    return f"{AGENT_SYSTEM_PROMPT}\n\n{TOOL_LIST_HEADER}\n{lines}"


def read_call(reply: str) -> ToolCall | None:
    """The tool call of a reply, without hidden arguments; None (logged at debug) when it has none."""
    try:
        call = parse_tool_call(reply)
    except ParseError as exc:
        log.debug("unparseable AppWorld reply: %s", exc)
        return None
    if any(k in call.arguments for k in HIDDEN_ARGUMENTS):
        call = ToolCall(call.name, {k: v for k, v in call.arguments.items() if k not in HIDDEN_ARGUMENTS},
                        call.form, call.repaired, call.extra_calls)
    return call


def parse_action(reply: str) -> str | None:
    """The canonical call of a reply (the episode's action), None when there is none."""
    call = read_call(reply)
    return None if call is None else call.canonical()


def action_call(action: str) -> tuple[str, dict]:
    """``(name, arguments)`` of a canonical action."""
    value = json.loads(action)
    first = value[0] if isinstance(value, list) else value
    return first["name"], dict(first.get("parameters") or {})


def tool_response_message(response: str) -> str:
    """The user message that carries a tool's response to the agent."""
    return f"<tool_response>\n{response}\n</tool_response>"


def unwrap_tool_response(message: str) -> str:
    """The response inside a ``<tool_response>`` message (the message itself when it has no tags)."""
    text = message.strip()
    if text.startswith("<tool_response>") and text.endswith("</tool_response>"):
        return text[len("<tool_response>"):-len("</tool_response>")].strip()
    return text
