"""ScienceWorld facts the simulator relies on, each checked against the real env.

Measured on ScienceWorld 1.2.3 with the ``easy`` simplification (see
``scripts/measure_sciworld_responder.py`` for the agreement check):

* the parser is case-insensitive and collapses spaces; "teleport to [the] <room>" always succeeds
  with "You teleport to the <room>." (``teleportAction``);
* "go to <room>" succeeds between rooms joined by an open door ("You move to the <room>."), answers
  "It's not clear how to get there from here." for the current room and "No known action matches
  that input." for a room not joined to it;
* "wait" / "wait1" answer "You decide to wait for 10 / 1 iterations.", "task" the task description;
* looking is free (no tick); every other accepted action advances time, and the kitchen, the
  outside and the greenhouse change with time alone (thermometers, animals, bees), the other rooms
  only when the agent acts in them;
* the first words below never start an accepted command (probed with many objects and phrasings).
"""

from __future__ import annotations

import re

ROOMS = ("hallway", "kitchen", "outside", "foundry", "greenhouse", "workshop", "bedroom", "living room",
         "art studio", "bathroom")
#: Rooms whose look-around text changes with time alone.
DYNAMIC_ROOMS = frozenset({"kitchen", "outside", "greenhouse"})
NO_MATCH = "No known action matches that input."
#: First words that never start an accepted ScienceWorld command.
UNKNOWN_VERBS = frozenset("""
add again answer apply ask attach bake boil break bring build burn buy carry catch change check chop clean climb
collect combine cook cool count cover crush cut d dig dip drink drive dry e empty enter exit extinguish fill find
fix flip fold freeze g give grab grow hammer heat hint hit hold i ignite insert inspect inv jump kick kill kiss
knock l leave lift light listen lock make measure melt n observe operate paint place plant play plug press pull
push quit record remove repair restore rotate rub run s save say scan score search see shake shine shoot sit sleep
slide smell spill spray squeeze stand start step stop swim switch talk taste tell test think throw tie touch type
u undo unlock unplug w warm wash watch water wear weigh wet wipe write x z
""".split())
#: Actions that change nothing in the world (looking costs no time; the rest only move the agent or time).
LOOK_ACTIONS = frozenset({"look around", "look", "inventory", "task"})

_DOOR_RE = re.compile(r"door to (?:the )?([a-z ]+?) \(that is (open|closed)\)")
_ROOM_RE = re.compile(r"^This (?:room|outside location) is called the ([a-z ]+?)\.", re.MULTILINE)


def normalize_action(action: str) -> str:
    """Lower-case, strip, collapse whitespace (the parser does the same)."""
    return " ".join(action.lower().split())


def room_of(look_text: str) -> str | None:
    """The room a look-around text describes."""
    m = _ROOM_RE.search(look_text)
    return m.group(1) if m else None


def doors(look_text: str) -> dict[str, str]:
    """``{neighbour room: "open" | "closed"}`` from a look-around text."""
    return {room: state for room, state in _DOOR_RE.findall(look_text) if room in ROOMS}


def adjacency(room_map: dict[str, str]) -> dict[str, list[str]]:
    """Room connections from the look-around text of every room."""
    return {room: sorted(doors(text)) for room, text in room_map.items()}


def target_room(action: str, verb: str) -> str | None:
    """``"teleport to the kitchen"`` -> ``"kitchen"`` (None if the rest is not a room name)."""
    rest = action[len(verb):].strip()
    rest = rest[3:] if rest.startswith("to ") else rest
    rest = rest[4:] if rest.startswith("the ") else rest
    return rest if rest in ROOMS else None
