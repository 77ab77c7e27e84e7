"""What AppWorld's world model is asked for one tool call: the same text in its training rows and at run time.

* system — an instruction, the user's world (identity, accounts, task, date and the app records, the
  row's ``wm_system_prompt`` up to its records; the paper's per-API notes after them are left out, the
  real API's schema stands in for them) and the called API: method, path, description, parameters and
  its response schema from the apps' code (:func:`tool_text`);
* state — the apps logged in to and the last :data:`HISTORY_STEPS` calls with their responses (each cut
  at :data:`RESPONSE_CHARS` characters, the cut said in the text; access tokens shown as ``"<token>"``);
* action — the call in canonical form, ``[{"name": ..., "parameters": {...}}]``.

That is the ``ours`` layout. ``paper`` (``$APPWORLD_WM_PROMPT=paper``, the builder's ``--prompt-style paper``) is
the paper's query byte for byte (:mod:`~textwm.envs.appworld.paper_prompt`): its system prompt, the agent's
conversation as the state and the call as an OpenAI tool-call message as the action.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from textwm.envs.appworld import agent, paper_prompt, tools
from textwm.envs.appworld.world import World, records_region
from textwm.envs.contract import WMQuery

#: The WM prompt layouts; ``$APPWORLD_WM_PROMPT`` picks one for the simulator.
LAYOUTS = ("ours", "paper")
WM_PROMPT_ENV = "APPWORLD_WM_PROMPT"

_TOKEN = re.compile(r'("access_token":\s*)"[^"]*"')
HISTORY_STEPS = 3
RESPONSE_CHARS = 800
#: Longest world text in a prompt; longer record lists are cut with a note.
WORLD_CHARS = 24000

WM_INSTRUCTION = """\
You are AppWorld's API server. Answer the tool call in the user turn with exactly the JSON its API returns
for this user's world and the calls so far: a JSON value, or {"error": "..."} worded as the app reports
failures. No prose, no markdown."""


def world_text(world: World) -> str:
    """The row's world description up to the end of its records (cut at :data:`WORLD_CHARS`)."""
    lines = world.text.splitlines()
    _, end = records_region(lines)
    text = "\n".join(lines[:end]).rstrip()
    if len(text) > WORLD_CHARS:
        cut = text.rfind("\n", 0, WORLD_CHARS)
        text = f"{text[:cut]}\n    ... ({len(text) - cut} more characters of records not shown)"
    return text


def tool_text(name: str) -> str:
    """The called API: method, path, one-line description, parameters (type, required or default), the success
    response's schema. Parameter descriptions are left out: the prompt stays short and the names say enough."""
    tool = tools.catalog().get(name)
    if tool is None:
        return f"Tool: {name} (no such API)"
    params = ", ".join(f"{p.name}: {p.type}{'' if p.required else f' = {p.default!r}'}" for p in tool.params)
    returns = json.dumps(tool.returns, ensure_ascii=False) if tool.returns is not None else "unknown"
    description = tool.description.split("\n", 1)[0]
    return f"Tool: {tool.name}({params}) -> {tool.method} {tool.path}\n{description}\nReturns on success: {returns}"


def system_prompt(world: World, name: str) -> str:
    return f"{WM_INSTRUCTION}\n\n{world_text(world)}\n\n{tool_text(name)}"


def cut(response: str) -> str:
    """A past response as the state shows it: tokens masked (their text is noise to the WM: the real app's
    secret and clock, never passed back by the agent), cut at :data:`RESPONSE_CHARS`."""
    response = _TOKEN.sub(r'\1"<token>"', response)
    if len(response) <= RESPONSE_CHARS:
        return response
    return f"{response[:RESPONSE_CHARS]} ... ({len(response) - RESPONSE_CHARS} more characters)"


def state_text(logged_in: Collection[str], history: Sequence[tuple[str, str]]) -> str:
    lines = [f"Logged in: {', '.join(sorted(logged_in)) or 'none'}", "Recent calls:"]
    for action, response in history[-HISTORY_STEPS:]:
        lines += [f"> {action}", cut(response)]
    if not history:
        lines.append("(none)")
    return "\n".join(lines)


def wm_query(world: World, logged_in: Collection[str], history: Sequence[tuple[str, str]], action: str, *,
             layout: str = "ours", start_messages: Sequence[Mapping[str, Any]] = ()) -> WMQuery:
    """The WM query for ``action`` (a canonical call) after ``history`` ((call, response) pairs) in ``layout``.
    ``start_messages``: the agent's system and first user message, the start of the paper's state (required there)."""
    name, arguments = agent.action_call(action)
    if layout == "ours":
        return WMQuery(system_prompt=system_prompt(world, name), state=state_text(logged_in, history), action=action)
    if layout != "paper":
        raise ValueError(f"AppWorld WM prompt layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if not start_messages:
        raise ValueError("the paper's AppWorld WM prompt needs the agent's start messages (its state is the "
                         "conversation)")
    args = paper_prompt.wm_arguments(arguments)
    conversation = paper_prompt.conversation(start_messages, history, action)
    return WMQuery(system_prompt=paper_prompt.system_prompt(world.text, name, args),
                   state=paper_prompt.user_state(conversation),
                   action=paper_prompt.user_action(name, args, turn=len(history)))
