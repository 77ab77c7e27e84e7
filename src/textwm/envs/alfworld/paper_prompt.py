"""The paper's ALFWorld world-model query, byte for byte (``wm_prompt: paper``).

The paper's plugin rebuilds the room's state for every action from two sources: the row's baked
``wm_system_prompt`` (``Task:``, ``Task type:``, ``Goal predicates:``, the ``## INITIAL SCENE`` receptacles with
their open / closed state and the ``## INITIAL OBJECT LOCATIONS``) and every user or tool message of the agent's
conversation, read with TextWorld's phrasings ("You arrive at X. On the X, you see ...", "You pick up the O from
the S.", ...). From that state it writes ENVIRONMENT STATE (task, goal, location, inventory, every receptacle with
its open / closed tag, the known contents, the object states), TASK CONTEXT (the action), the fixed DOMAIN RULES
and STEERING DIRECTIVES (``paper_rules.txt``, the paper's text verbatim: a world model trained on the paper's data
is steered by exactly these words) and PREDICTION TARGET. The user message is ``State: <the conversation as
JSON>\\n\\nAction: <action>``, the action as plain text.

:class:`RoomState` follows the paper's reading rules, quirks included, since the world model was trained on what
they produce: a receptacle the scene lists as open is tagged "OPEN (was closed; agent has opened it)", and an
arrival listed under a name without its number ("On the stoveburner, you see ...") is still read.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

IDENTITY = ("ALFWorld is a TextWorld household environment derived from ALFRED. The agent operates in a single room "
            "(kitchen / bathroom / bedroom / living-room / office) populated with receptacles (cabinet, drawer, "
            "fridge, microwave, countertop, shelf, sidetable, diningtable, desk, dresser, bed, sinkbasin, "
            "stoveburner, toilet, bathtub, garbagecan, etc.) each carrying a 1-indexed instance id (e.g. 'cabinet "
            "8'). Objects are also 1-indexed within their class (e.g. 'apple 1', 'mug 2'). All names are lowercase.")
TASK_CONTEXT = ("Predict ONLY the next textworld feedback string for the action below. The agent is interacting with "
                "the env one action at a time; you are predicting what textworld would print as the immediate "
                "response to the action \u2014 exactly one short paragraph of plain English. Do NOT plan, do NOT "
                "solve the task, do NOT echo the action, do NOT list admissible commands, do NOT output JSON or "
                "markdown.")
MIDDLE_OF_ROOM = "middle of the room (no receptacle in front)"
CLOSED_TAG = "currently CLOSED \u2014 must be opened to take/place inside"
OPENED_TAG = "OPEN (was closed; agent has opened it)"
OPEN_TAG = "open / not openable (countertop, table, shelf, sinkbasin, stoveburner, etc.)"

_NAME = r"[\w ]+\d+"
_SCENE_LINE = re.compile(rf"-\s+({_NAME})\s*\((open|closed|unknown)\)")
_LOCATION_LINE = re.compile(rf"-\s+({_NAME})\s*:\s*(?:in|on)\s+({_NAME})")
_ARRIVED_CLOSED = re.compile(rf"You arrive at ({_NAME})\. The \1 is closed\.")
_ARRIVED_SEEING = re.compile(rf"You arrive at ({_NAME})\. On the \1, you see (.+?)\.", re.S)
_ARRIVED_SEEING_LOOSE = re.compile(rf"You arrive at ({_NAME})\. On the [^,]+, you see (.+?)\.", re.S)
_ARRIVED_NOTHING_LOOSE = re.compile(rf"You arrive at ({_NAME})\. On the [^,]+, you see nothing\b")
_ARRIVED_NOTHING = re.compile(rf"You arrive at ({_NAME})\. On the \1, you see nothing\.")
_OPENED_SEEING = re.compile(rf"You open the ({_NAME})\. The \1 is open\. In it, you see (.+?)\.", re.S)
_OPENED_NOTHING = re.compile(rf"You open the ({_NAME})\. The \1 is open\. In it, you see nothing\.")
_CLOSED = re.compile(rf"You close the ({_NAME})\.")
_TOOK = re.compile(rf"You pick up the ({_NAME}) from the ({_NAME})\.")
_PUT = re.compile(rf"You (?:move|put) the ({_NAME}) (?:to|in/on|in|on) the ({_NAME})\.")
#: Observation -> the state it gives its object.
_MODIFIERS = ((re.compile(rf"You clean the ({_NAME}) using the ({_NAME})\."), "clean"),
              (re.compile(rf"You heat the ({_NAME}) using the ({_NAME})\."), "hot"),
              (re.compile(rf"You cool the ({_NAME}) using the ({_NAME})\."), "cool"),
              (re.compile(rf"You slice the ({_NAME}) using the ({_NAME})\."), "sliced"),
              (re.compile(rf"You turn on the ({_NAME})\."), "on"))
_NUMBERED = re.compile(rf"^{_NAME}$")


def _section(baked: str, header: str) -> str:
    m = re.search(rf"^{re.escape(header)}\s*$(.*?)(?=^##\s|\Z)", baked, re.MULTILINE | re.DOTALL)
    return m.group(1).strip() if m else ""


def _line(baked: str, key: str, default: str) -> str:
    m = re.search(rf"^{key}:\s*(.+)$", baked, re.MULTILINE)
    return m.group(1).strip() if m else default


def listed(items: str) -> list[str]:
    """``"a apple 1, a mug 2, and a pan 1"`` -> ``["apple 1", "mug 2", "pan 1"]``."""
    chunks = re.split(r",\s*(?:and )?| and ", re.sub(r"^a |^an ", "", items.strip()))
    return [c for c in (re.sub(r"^a |^an ", "", c.strip()) for c in chunks) if c]


@dataclass
class RoomState:
    """The room as the paper's plugin reads it: receptacles in order of first mention, open / closed marks,
    contents per receptacle (insertion-ordered), the inventory, object states, every object named so far."""

    current: str | None = None
    inventory: list[str] = field(default_factory=list)
    opened: set[str] = field(default_factory=set)
    closed: set[str] = field(default_factory=set)
    contents: dict[str, list[str]] = field(default_factory=dict)
    modifiers: dict[str, set[str]] = field(default_factory=dict)
    receptacles: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    @classmethod
    def from_baked(cls, baked: str) -> RoomState:
        state = cls()
        for line in _section(baked, "## INITIAL SCENE").splitlines():
            m = _SCENE_LINE.match(line.strip())
            if m:
                name = m.group(1).strip()
                state.receptacles.append(name)
                {"closed": state.closed, "open": state.opened}.get(m.group(2), set()).add(name)
        for line in _section(baked, "## INITIAL OBJECT LOCATIONS").splitlines():
            m = _LOCATION_LINE.match(line.strip())
            if m:
                obj, place = m.group(1).strip(), m.group(2).strip()
                state.contents.setdefault(place, []).append(obj)
                state.seen.add(obj)
        return state

    def _arrive(self, place: str, *, is_open: bool | None) -> None:
        self.current = place
        if is_open is True:
            self.opened.add(place)
            self.closed.discard(place)
        elif is_open is False:
            self.closed.add(place)
            self.opened.discard(place)
        if place not in self.receptacles:
            self.receptacles.append(place)

    def _add(self, place: str, objects: Iterable[str]) -> None:
        objects = list(objects)
        self.contents[place] = list(dict.fromkeys([*self.contents.get(place, []), *objects]))
        self.seen.update(objects)

    def read(self, text: str) -> None:
        """Advance by one observation, each phrasing in the paper's order."""
        for m in _ARRIVED_CLOSED.finditer(text):
            self._arrive(m.group(1), is_open=False)
        strict = _ARRIVED_SEEING.search(text)
        for m in _ARRIVED_SEEING.finditer(text):
            self._arrive(m.group(1), is_open=True)
            self._add(m.group(1), listed(m.group(2)))
        for m in _ARRIVED_SEEING_LOOSE.finditer(text):
            place, items = m.group(1), m.group(2).strip()
            if strict and place == strict.group(1):
                continue
            self._arrive(place, is_open=True)
            if items.lower() == "nothing":
                self.contents[place] = []
            else:
                self._add(place, [self._numbered(o) for o in listed(items)])
        for m in _ARRIVED_NOTHING_LOOSE.finditer(text):
            self._arrive(m.group(1), is_open=None)
            self.contents.setdefault(m.group(1), [])
        for m in _ARRIVED_NOTHING.finditer(text):
            self._arrive(m.group(1), is_open=None)
            self.contents[m.group(1)] = []
        for m in _OPENED_SEEING.finditer(text):
            self.opened.add(m.group(1))
            self.closed.discard(m.group(1))
            self._add(m.group(1), listed(m.group(2)))
        for m in _OPENED_NOTHING.finditer(text):
            self.opened.add(m.group(1))
            self.closed.discard(m.group(1))
            self.contents[m.group(1)] = []
        for m in _CLOSED.finditer(text):
            if m.group(1) in self.opened:
                self.opened.discard(m.group(1))
                self.closed.add(m.group(1))
        for m in _TOOK.finditer(text):
            obj, source = m.group(1), m.group(2)
            if obj not in self.inventory:
                self.inventory.append(obj)
            if obj in self.contents.get(source, []):
                self.contents[source].remove(obj)
            self.seen.add(obj)
        for m in _PUT.finditer(text):
            obj, place = m.group(1), m.group(2)
            if obj in self.inventory:
                self.inventory.remove(obj)
            held = self.contents.setdefault(place, [])
            if obj not in held:
                held.append(obj)
            self.seen.add(obj)
        for pattern, modifier in _MODIFIERS:
            for m in pattern.finditer(text):
                self.modifiers.setdefault(m.group(1), set()).add(modifier)

    def _numbered(self, name: str) -> str:
        """A listed name without its number, given the one object seen of that class (else as it is)."""
        if _NUMBERED.match(name):
            return name
        matches = [s for s in self.seen if s.startswith(name + " ")]
        return matches[0] if len(matches) == 1 else name

    def tag(self, receptacle: str) -> str:
        if receptacle in self.closed and receptacle not in self.opened:
            return CLOSED_TAG
        return OPENED_TAG if receptacle in self.opened else OPEN_TAG


def room_state(baked: str, conversation: Sequence[Mapping[str, Any]]) -> RoomState:
    """The state after every user or tool message of ``conversation``."""
    state = RoomState.from_baked(baked)
    for message in conversation:
        if isinstance(message, Mapping) and message.get("role") in ("user", "tool"):
            state.read(str(message.get("content") or ""))
    return state


@functools.cache
def rules_text() -> str:
    """The paper's DOMAIN RULES and STEERING DIRECTIVES, verbatim, with the blank line that ends them (read once:
    every world-model query carries them)."""
    return files("textwm.envs.alfworld").joinpath("paper_rules.txt").read_text(encoding="utf-8")


def system_prompt(baked: str, conversation: Sequence[Mapping[str, Any]], action: str) -> str:
    """The paper's WM system prompt for ``action``: ``baked`` is the row's ``wm_system_prompt`` (the paper's
    layout), ``conversation`` the agent's messages so far."""
    state = room_state(baked, conversation)
    goal = _line(baked, "Goal predicates", "")
    parts = ["## ENVIRONMENT STATE", IDENTITY,
             f"Task: {_line(baked, 'Task', '(unknown)')}",
             f"Task type: {_line(baked, 'Task type', '(unknown)')}",
             *([f"Goal predicates: {goal}"] if goal else []),
             f"Current location: {state.current or MIDDLE_OF_ROOM}",
             f"Inventory: {', '.join(state.inventory) if state.inventory else '(empty)'}",
             "",
             "Receptacles in this room (all 1-indexed, lowercase):",
             *(f"- {r}: {state.tag(r)}" for r in state.receptacles),
             ""]
    if state.contents:
        parts += ["Known receptacle contents (pre-baked from initial scene walk + updates from this rollout's "
                  "take/put events):",
                  *(f"  [{r}] {', '.join(items) if items else '(empty)'}" for r, items in state.contents.items()),
                  ""]
    if any(state.modifiers.values()):
        parts += ["Object state modifiers acquired earlier in this rollout:",
                  *(f"- {obj}: {', '.join(sorted(m))}" for obj, m in state.modifiers.items() if m),
                  ""]
    parts += ["## TASK CONTEXT", TASK_CONTEXT, f"Active action (verbatim, lowercase): {action}", ""]
    return "\n".join(parts) + "\n" + rules_text() + (
        f"PREDICTION TARGET: The single textworld feedback paragraph that the engine would print in response to the "
        f"action `{action}` from the environment state above.")


def user_state(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The ``state`` of the query: the conversation as the paper's proxy dumps it (``json.dumps`` defaults)."""
    return json.dumps(list(conversation))
