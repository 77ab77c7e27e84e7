"""The paper's ScienceWorld world-model query, byte for byte (``wm_prompt: paper``).

The paper's plugin does not send the world model the row's ``wm_system_prompt``; it reads three things out of it
(the task line, the current room's block of the room map, the room connections) and writes a fresh system prompt
for each action: ENVIRONMENT STATE (the room the conversation last named, that room's listing as baked at the
start, the inventory it tracked from ``pick up`` / ``put``, the room connections), TASK CONTEXT (the action),
DOMAIN RULES, STEERING DIRECTIVES and PREDICTION TARGET. The user message is ``State: <the agent's conversation
as JSON>\\n\\nAction: <[{"role": "assistant", "content": action}] as JSON>``, the agent's current action last in
the conversation too. A world model trained on the paper's data was trained on this text; this module writes it
from the same inputs (:func:`system_prompt`, :func:`user_state`, :func:`user_action`) and bakes the per-task
prompt it reads from our tasks (:func:`baked_prompt`).

The rule and directive texts below are the paper's, kept verbatim: a world model trained on them is steered by
exactly these words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from textwm.envs.sciworld.tracker import Task

UNKNOWN_ROOM = "unknown"

DOMAIN_RULES = (
    "- 'teleport to X' always succeeds. Response: 'You teleport to the X.'",
    "- 'go to X' only works if X is adjacent to the current room. If not adjacent: 'No known action matches that "
    "input.'",
    "- 'look around' returns a plain text list of objects in the current room. Format: 'This room is called X. In "
    "it, you see: obj1, obj2, obj3. You also see: door to Y, door to Z.'",
    "- 'pick up X' works only if X is visible in the current room AND has not already been picked up. Response: "
    "'You move the X to the inventory.' If X is not present or already picked up: 'No known action matches that "
    "input.'",
    "- 'focus on X' works ONLY if X is explicitly listed in the current room description OR was previously picked "
    "up (in inventory). If X does NOT appear in the visible objects or inventory, respond: 'No known action matches "
    "that input.' NEVER confirm focus on an object that is not visibly present or in inventory \u2014 this is "
    "critical.",
    "- 'activate X' / 'deactivate X' works if X is in the current room. Response: 'The X is now "
    "activated/deactivated.'",
    "- 'put X in/on Y' works if X is in inventory. Response: 'You move the X to the Y.'",
    "- 'open X' / 'close X' works on doors and containers in the current room.",
    "- 'inventory' lists items the agent has picked up.",
    "- 'wait' / 'wait1' advances time. Response: '(1 tick passes)'",
    "- Invalid actions or objects not present: 'No known action matches that input.'",
    "- Items picked up earlier in the conversation are in inventory and no longer in their original room.",
)

STEERING_DIRECTIVES = (
    "GROUNDING RULE: Your response MUST use ONLY objects, rooms, and substances that appear in the ENVIRONMENT "
    "STATE section above. Do NOT invent, hallucinate, or elaborate beyond what is listed. If the environment state "
    "lists 'a brick, a workbench', respond with EXACTLY those items \u2014 do not add tools, equipment, or "
    "descriptions that are not in the state.",
    "- For 'look around': copy the room description from the Visible objects section above VERBATIM. Do not add "
    "objects, do not elaborate, do not write prose. Just the object list.",
    "- For 'pick up X': check if X appears in the Visible objects. If yes: 'You move the X to the inventory.' If "
    "no: 'No known action matches that input.'",
    "- For 'focus on X': check Visible objects AND inventory. If X not found: 'No known action matches that "
    "input.'",
    "- Keep responses SHORT \u2014 one or two sentences maximum. Never write paragraphs, stories, or elaborate "
    "descriptions.",
    "- Output plain text only. No JSON, no markdown, no code, no arrays, no role tags.",
)

#: The map as the paper's baked prompts state it (its order, not alphabetical: the text must match).
ROOM_CONNECTIONS = (
    "- hallway connects to: kitchen, bedroom, living room, art studio, greenhouse, workshop",
    "- kitchen connects to: hallway, outside, bathroom",
    "- outside connects to: kitchen, foundry, greenhouse",
    "- foundry connects to: outside",
    "- greenhouse connects to: hallway, outside",
    "- workshop connects to: hallway",
    "- bedroom connects to: hallway",
    "- living room connects to: hallway",
    "- art studio connects to: hallway",
    "- bathroom connects to: kitchen",
)
#: The order of the rooms in the paper's baked room map.
MAP_ORDER = ("hallway", "kitchen", "workshop", "greenhouse", "bedroom", "living room", "art studio", "foundry",
             "bathroom", "outside")

_MOVED_RE = re.compile(r"You (?:move|teleport) to the (.+?)\.")
_LISTING_RE = re.compile(r"(?:This room|This outside location) is called the (.+?)\.")
_CALLED_RE = re.compile(r"is called the (.+?)\.")
_TASK_RE = re.compile(r"Task: (.*?)(?:\n|$)")
_CONNECTIONS_RE = re.compile(r"## ROOM CONNECTIONS\n(.*?)(?=\n\n##|\Z)", re.DOTALL)
_PICK_UP_RE = re.compile(r"pick up (.+)")
_PUT_RE = re.compile(r"put (.+?) (?:in|on) (.+)")


def current_room(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The room the latest user message that names one names: a move or teleport, else a listing's "is called
    the X.", else (the start message, ``You are in: ...``) any "is called the X."; ``unknown`` when none does."""
    for message in reversed(conversation):
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        content = str(message.get("content", ""))
        for pattern in (_MOVED_RE, _LISTING_RE):
            m = pattern.search(content)
            if m:
                return m.group(1)
        if "You are in:" in content:
            m = _CALLED_RE.search(content)
            if m:
                return m.group(1)
    return UNKNOWN_ROOM


def room_block(baked: str, room: str) -> str:
    """The room's line in the baked prompt's room map (``[room]`` then its text), or empty."""
    m = re.search(rf"\[{re.escape(room)}\]\n(.*?)(?=\n\n\[|\n\n##|\Z)", baked, re.DOTALL)
    return m.group(1).strip() if m else ""


def system_prompt(baked: str, conversation: Sequence[Mapping[str, Any]], action: str,
                  inventory: Iterable[str] = ()) -> str:
    """The paper's WM system prompt for ``action``: ``baked`` is the row's ``wm_system_prompt`` (the paper's
    layout, :func:`baked_prompt`), ``conversation`` the agent's messages so far (its current action last),
    ``inventory`` the item names the episode picked up and did not put down."""
    room = current_room(conversation)
    contents = room_block(baked, room) if room != UNKNOWN_ROOM else ""
    task = _TASK_RE.search(baked)
    connections = _CONNECTIONS_RE.search(baked)
    items = sorted(set(inventory))
    parts = ["## ENVIRONMENT STATE",
             "ScienceWorld is a text-based interactive science experiment environment with 10 rooms.",
             f"The agent is currently in: {room}.",
             f"Task: {task.group(1).strip() if task else 'Unknown task'}",
             ""]
    if contents:
        parts += [f"Visible objects in {room}:", contents, ""]
    if items:
        parts += [f"Agent's inventory: {', '.join(items)}", ""]
    if connections and connections.group(1).strip():
        parts += ["Room adjacency (for 'go to' validation):", connections.group(1).strip(), ""]
    parts += ["## TASK CONTEXT",
              "The agent navigates rooms, picks up objects, and performs science experiments.",
              "Actions are plain text commands like 'teleport to kitchen', 'pick up glass cup', 'focus on water'.",
              f"The active action is: {action}",
              "",
              "## DOMAIN RULES", *DOMAIN_RULES, "",
              "## STEERING DIRECTIVES", *STEERING_DIRECTIVES, "",
              f"PREDICTION TARGET: The ScienceWorld observation text produced by the action '{action}' given the "
              "current environment state."]
    return "\n".join(parts)


def user_state(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The ``state`` of the query: the conversation as the paper's proxy dumps it (``json.dumps`` defaults:
    ASCII escapes, ``", "`` and ``": "`` separators)."""
    return json.dumps(list(conversation))


def user_action(action: str) -> str:
    """The ``action`` of the query: the paper sends the action as a one-message list."""
    return json.dumps([{"role": "assistant", "content": action}])


def tracked_inventory(steps: Iterable[tuple[str, str]]) -> set[str]:
    """The paper's inventory: ``pick up X`` answered "You move the ... inventory" adds X (as typed, lower-cased),
    ``put X in/on Y`` answered "You move the ..." removes it."""
    items: set[str] = set()
    for action, observation in steps:
        a, o = action.lower().strip(), observation.lower()
        picked, put = _PICK_UP_RE.match(a), _PUT_RE.match(a)
        if picked and "you move the" in o and "inventory" in o:
            items.add(picked.group(1).strip())
        elif put and "you move the" in o:
            items.discard(put.group(1).strip())
    return items


def conversation_of(start: Sequence[Mapping[str, Any]], steps: Iterable[tuple[str, str]],
                    action: str) -> list[dict[str, str]]:
    """The agent's conversation at ``action``: its start messages, each earlier (action, observation), then the
    action itself (ms-swift appends the agent's reply before the plugin asks the world model)."""
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in start]
    for a, o in steps:
        messages += [{"role": "assistant", "content": a}, {"role": "user", "content": o}]
    return [*messages, {"role": "assistant", "content": action}]


def one_line(listing: str) -> str:
    """A look-around as the paper's room map keeps it: lines stripped and joined by spaces, "the agent" dropped."""
    lines = [line.strip() for line in listing.split("\n")]
    kept = [line for line in lines if line and line != "the agent"]
    return " ".join(kept) if kept else listing


def baked_prompt(task: Task) -> str:
    """The per-task ``wm_system_prompt`` in the paper's layout, from a task baked here: the sections
    :func:`system_prompt` reads (the task line, the room map, the connections) where the paper puts them."""
    rooms = "\n\n".join(f"[{room}]\n{one_line(task.room_map[room])}" for room in MAP_ORDER if room in task.room_map)
    task_type = task.task_id.rsplit("_v", 1)[0]
    return "\n".join([
        "## ENVIRONMENT",
        "ScienceWorld text-based interactive environment.",
        "10 interconnected rooms. The agent navigates between rooms, picks up objects, and performs science "
        "experiments.",
        "",
        f"Task: {task.task_description}",
        f"Task type: {task_type}",
        "",
        "## STARTING STATE",
        task.initial_observation,
        "",
        "## COMPLETE ROOM MAP",
        rooms,
        "",
        "## ROOM CONNECTIONS",
        *ROOM_CONNECTIONS,
    ])


#: What the paper's plugin answers to ``wait`` / ``wait1`` (the real env reports the ticks differently).
PAPER_WAIT = "(1 tick passes)"
_TELEPORT_RE = re.compile(r"teleport to (.+)")
_FOCUS_RE = re.compile(r"focus on (.+)")


def paper_response(task: Task, steps: Sequence[tuple[str, str]], action: str) -> str | None:
    """The paper's plugin's own answer to ``action`` after ``steps`` ((action, observation) pairs), or None (the
    world model's): ``teleport to X`` always succeeds, ``wait`` / ``wait1`` -> "(1 tick passes)", ``inventory``
    lists :func:`tracked_inventory`, and ``focus on X`` is refused when X is "agent" or appears nowhere in the
    row's ``wm_system_prompt`` (:func:`baked_prompt`) nor in that inventory."""
    a = action.lower().strip()
    if teleport := _TELEPORT_RE.match(a):
        return f"You teleport to the {teleport.group(1).strip()}."
    if a in ("wait", "wait1"):
        return PAPER_WAIT
    inventory = tracked_inventory(steps)
    if a == "inventory":
        return f"In your inventory, you see: {', '.join(sorted(inventory))}" if inventory else "Your inventory is empty."
    if focus := _FOCUS_RE.match(a):
        target = focus.group(1).strip()
        if target == "agent" or not (target in baked_prompt(task).lower() or target in inventory):
            return "No known action matches that input."
    return None
