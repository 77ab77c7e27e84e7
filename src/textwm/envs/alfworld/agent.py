"""The agent side of ALFWorld: its prompt, the turn format, how an action is read from a reply.

Turns follow the paper's rows: each user message is ``Observation:\\n<text>\\n\\nAdmissible commands:\\n- ...``
and the agent answers one line ``Action: <command>``. An action is read the way the paper's plugin reads
it: think blocks dropped, the ``Action:`` line (else the first line), a final period dropped, the first
letter lower-cased, articles before a numbered name dropped (``take the mug 1`` -> ``take mug 1``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

AGENT_SYSTEM_PROMPT = """\
You are an agent doing household tasks in ALFWorld, a text environment of rooms with receptacles
(cabinets, drawers, countertops, a fridge, a microwave, a sink, ...) and objects in or on them.
The episode ends by itself when the task is done. Each turn you see an observation and the list of
admissible commands; answer with exactly one line, a command copied from that list:

Action: <command>

Commands: go to <receptacle>, open / close <receptacle>, take <object> from <receptacle>,
move <object> to <receptacle>, heat / cool / clean <object> with <microwave / fridge / sinkbasin>,
use <lamp>, examine <thing>, inventory, look. Closed receptacles must be opened to see or take
what is inside; a task such as "put a hot apple in the fridge" needs the apple heated first."""

DEFAULT_MAX_TURNS = 50
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ACTION_RE = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ARTICLE_RE = re.compile(r"\b(?:the|a|an) (\w+ \d+)")


def parse_action(reply: str) -> str | None:
    """The command in an agent reply, None when there is none."""
    text = _THINK_RE.sub("", reply or "").strip()
    m = _ACTION_RE.search(text)
    action = m.group(1) if m else (text.splitlines()[0] if text else "")
    action = action.strip().rstrip(".").strip()
    if not action:
        return None
    action = action[0].lower() + action[1:]
    return _ARTICLE_RE.sub(r"\1", action)


def user_turn(observation: str, admissible: Sequence[str]) -> str:
    """The user message of one turn (the first one carries the welcome text as its observation)."""
    commands = "\n".join(f"- {c}" for c in admissible)
    return f"Observation:\n{observation}\n\nAdmissible commands:\n{commands}"


def format_reply(action: str) -> str:
    """An assistant turn of an SFT demo (and the expert agent's reply)."""
    return f"Action: {action}"
