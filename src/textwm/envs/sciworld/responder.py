"""The local responder: ScienceWorld observations that follow from tracked state, no model needed.

:func:`respond` returns the exact text the real env would return, or None when the answer depends
on state the tracker cannot know (then the world model answers). Every rule is conservative and
measured against the real env (``scripts/measure_sciworld_responder.py``): an answer that
disagrees with the env is a bug, not an approximation.
"""

from __future__ import annotations

import re

from textwm.envs.sciworld.tracker import NON_MUTATING_VERBS, EpisodeTracker
from textwm.envs.sciworld.world import (
    DYNAMIC_ROOMS,
    NO_MATCH,
    UNKNOWN_VERBS,
    doors,
    normalize_action,
    target_room,
)

FOCUS = "focus on "
#: Words that do not say what an object is: articles and life stages (an egg hatches into a baby of its kind).
ARTICLES = frozenset({"a", "an", "the", "some", "of"})
STAGE_WORDS = frozenset({"baby", "adult", "juvenile", "young", "egg", "eggs", "hatchling"})
NOT_KIND_WORDS = ARTICLES | STAGE_WORDS
_WORD_RE = re.compile(r"[a-z0-9]+")

WAIT_TEXT = {"wait": "You decide to wait for 10 iterations.", "wait1": "You decide to wait for 1 iterations."}
NOT_CLEAR = "It's not clear how to get there from here."


def respond(tracker: EpisodeTracker, action: str) -> str | None:
    """The env's observation for ``action`` if tracked state determines it, else None."""
    a = normalize_action(action)
    if not a or tracker.awaiting_choice():
        return None  # after "Ambiguous request: ..." the env reads the next input as a choice number
    verb = a.split(" ", 1)[0]
    if verb in UNKNOWN_VERBS:
        return NO_MATCH
    if a in WAIT_TEXT:
        return WAIT_TEXT[a]
    if a == "task":
        return f"Task description:\n{tracker.task.task_description}"
    if verb == "teleport" and _simplifications(tracker) & {"easy", "teleportAction"}:
        room = target_room(a, "teleport")
        return f"You teleport to the {room}." if room else None
    if verb == "go":
        return _go(tracker, a)
    if a.startswith("open door to "):
        return _open_door(tracker, a)
    if a in ("look around", "look"):
        return _look(tracker)
    if a == "inventory":
        return None if tracker.inventory_changed else tracker.inventory_text
    if verb == "focus" and a.startswith(FOCUS):
        return _focus(tracker, a[len(FOCUS):])
    return None


def _focus(tracker: EpisodeTracker, target: str) -> str | None:
    """A focus on something nothing known of the episode names is refused, as the env refuses a focus on an object
    that is not here or in the inventory; one on an object of the start listing, at the start, is accepted (below);
    any other focus is left to the world model.

    Known: the names the parser accepted in this room at the start (a listing's "frog egg" is also a "common
    toad"), the room's latest listing (or its start listing), the inventory, and every observation so far (an object
    the agent picked up or made was named when it happened). A target counts as named when one of its words that
    say what it is (not its life stage or an article: ``baby``, ``egg``, ``the``) is known, so a renamed life stage
    or a partial name still goes to the world model. No answer once the agent did anything but move, look, wait or
    open and close doors (an opened freezer's ice is in reach, unnamed), nor in tasks baked without the room's
    names.

    A focus on an object the room's listing shows is accepted as the env accepts it, naming the object as the
    listing does ("focus on egg parrot" -> "You focus on the parrot egg."), when exactly one listed object's name
    is the target's words give or take its life stage, the agent is in the start room and few ticks have passed
    (the start listing is the env's own, and names change as animals grow); else the world model answers.
    """
    words = kind_words(target)
    names = tracker.task.room_objects.get(tracker.room)
    if not words or names is None or _objects_may_have_changed(tracker):
        return None     # opening a fridge or picking up a pot puts unnamed things in reach
    known = set(_WORD_RE.findall(" ".join([*names, tracker.room_contents(), tracker.inventory_text,
                                             tracker.task.initial_inventory, tracker.task.initial_observation,
                                             *(o for _, o in tracker.history)]).lower()))
    if not words & known:
        return NO_MATCH
    listed = _listing_now(tracker)
    if listed is None:
        return None
    said = _words(target) - ARTICLES
    # The listed name's words, or those and a life stage ("crocodile" names "the crocodile egg"); a stage that is
    # said must be the listed one ("baby parrot" is not "the parrot egg"), and any other extra word means another
    # object ("book" is not "the book shelf": the env takes a book on the shelf).
    matches = [name for name in listed if said <= _words(name) and _words(name) - said <= STAGE_WORDS]
    return f"You focus on the {matches[0]}." if len(matches) == 1 else None


#: Ticks the start listing's names stay the env's: animals change life stage (an egg's name with it) at ~11 ticks
#: in every lifespan task measured (30 variations, `wait1` after `teleport to outside`); a margin kept.
LISTING_FRESH_TICKS = 8


def _objects_may_have_changed(tracker: EpisodeTracker) -> bool:
    """Has the agent done anything that can change what is in reach, opening and closing doors aside?"""
    for action, observation in tracker.history:
        a = normalize_action(action)
        verb = a.split(" ", 1)[0] if a else ""
        if observation == NO_MATCH or verb in NON_MUTATING_VERBS:
            continue
        if verb in ("open", "close") and a.split(" ", 1)[1].startswith("door"):
            continue
        return True
    return False


def _listing_now(tracker: EpisodeTracker) -> list[str] | None:
    """The objects of the start listing while the agent is in the start room and at most
    :data:`LISTING_FRESH_TICKS` have passed (later, animals grow up and their names change; and a later listing may
    be the world model's), else None. Substances and the agent are left out."""
    if tracker.ticks > LISTING_FRESH_TICKS or tracker.room != tracker.task.start_room:
        return None
    text = tracker.task.initial_observation.split("You also see:", 1)[0]
    if "you see:" not in text:
        return None
    names = []
    for line in text.split("you see:", 1)[1].splitlines():
        # "a toilet. In the toilet is: a drain." -> "toilet"; "a fire pit (containing nothing)" -> "fire pit"
        item = re.sub(r"^(?:an?|the)\s+", "", line.strip(), flags=re.IGNORECASE)
        item = re.split(r" \(|, |\. ", item, maxsplit=1)[0].rstrip(".")
        if item and line.startswith(("\t", " ")) and not item.lower().startswith(("substance called", "agent")):
            names.append(item)         # as listed: the env's answer keeps its case ("unknown substance B")
    return names


def kind_words(name: str) -> set[str]:
    """The words of an object's name that say what it is: ``"the baby brown bear"`` -> ``{"brown", "bear"}``."""
    return _words(name) - NOT_KIND_WORDS


def _words(name: str) -> set[str]:
    return set(_WORD_RE.findall(name.lower()))


def _simplifications(tracker: EpisodeTracker) -> set[str]:
    return {s.strip() for s in tracker.task.simplification.split(",") if s.strip()}


def _go(tracker: EpisodeTracker, a: str) -> str | None:
    room = target_room(a, "go")
    if room is None or tracker.doors_changed:
        return None
    if room == tracker.room:
        return NOT_CLEAR
    neighbours = tracker.task.connections.get(tracker.room)
    if neighbours is None:
        return None
    if room in neighbours:
        door_state = _door_state(tracker, room)
        return f"You move to the {room}." if door_state == "open" else None
    return NO_MATCH


def _open_door(tracker: EpisodeTracker, a: str) -> str | None:
    """Doors start open in the easy simplification; opening one again says so."""
    room = target_room(a, "open door")
    if room is None or tracker.doors_changed:
        return None
    return "The door is already open." if _door_state(tracker, room) == "open" else None


def _door_state(tracker: EpisodeTracker, room: str) -> str | None:
    return doors(tracker.task.room_map.get(tracker.room, "")).get(room)


def _look(tracker: EpisodeTracker) -> str | None:
    room = tracker.room
    if _unchanged_since_last_look(tracker) and room in tracker.last_look:
        # No time has passed since the agent looked here. (A look answered by the world model with another
        # room's name is kept under that room, so the tracker's room may have none.)
        return tracker.last_look[room]
    if room in tracker.changed_rooms or tracker.doors_changed:
        return None
    if tracker.ticks == 0 and room == tracker.task.start_room:
        return tracker.task.initial_observation
    if room in DYNAMIC_ROOMS or room not in tracker.task.stable_rooms:
        return None
    return tracker.task.room_map.get(room)


#: Tokens a room's listing slot may take, and its door list's (when a door changed since the row was baked).
LISTING_TOKENS = 96
DOOR_TOKENS = 48
_LISTING_START = re.compile(r"(?:In it, you see|Here you see): ?\n")
_DOORS = "\nYou also see:\n"


def known_frame(tracker: EpisodeTracker, action: str) -> list | None:
    """The part of a look's answer the state decides when :func:`respond` cannot answer it whole (what lies in a
    room changed, or was never baked as stable): the room's name line and, unless a door changed, its door list
    (from the row's baked look of that room), around a slot for the objects, as a ``response_template``. None for
    every other action, or a room the row has no look of."""
    a = normalize_action(action)
    if a not in ("look around", "look") or tracker.awaiting_choice():
        return None
    baked = tracker.task.room_map.get(tracker.room or "")
    start = _LISTING_START.search(baked or "")
    doors_at = baked.find(_DOORS) if baked else -1
    if start is None or doors_at < start.end():
        return None
    head = baked[:start.end()]
    if tracker.doors_changed:
        return [head, {"fill": LISTING_TOKENS}, _DOORS, {"fill": DOOR_TOKENS}]
    return [head, {"fill": LISTING_TOKENS}, baked[doors_at:]]


def observed_frame(observation: str) -> list[tuple[bool, str]] | None:
    """:func:`known_frame`'s frame read off a look's observation (its door list as fixed text, as when no door
    changed): ``[(False, head), (True, objects), (False, doors)]``; None for any other observation."""
    start = _LISTING_START.search(observation)
    doors_at = observation.find(_DOORS)
    if start is None or doors_at <= start.end() or not observation.startswith(("This room", "This outside")):
        return None
    return [(False, observation[:start.end()]), (True, observation[start.end():doors_at]),
            (False, observation[doors_at:])]


def _unchanged_since_last_look(tracker: EpisodeTracker) -> bool:
    """The latest step that cost time came before the agent's latest look (here)."""
    for action, observation in reversed(tracker.history):
        a = normalize_action(action)
        if a in ("look around", "look") and observation.startswith(("This room", "This outside")):
            return True
        if observation == NO_MATCH or a in ("inventory", "task"):
            continue  # rejected actions and these reads take no time
        return False
    return False
