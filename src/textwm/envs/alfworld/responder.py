"""The local responder of ALFWorld: the observation of an action wherever the tracked state decides it.

Texts are the TWL2 grammar's (``alfred.twl2``): "You arrive at X. The X is closed.", "You open the X. The
X is open. In it, you see ...", "You pick up the O from the R.", "You move the O to the R.", "You heat the
O using the R.", "You turn on the L.", inventory, examine, look and help. A command that is not
admissible gets the game's "Nothing happens.". None (ask the world model) where the state does not
decide: what lies in a receptacle the row did not describe. There :func:`known_frame` gives what the state
does decide, the sentence around the unknown listing, as a template for the world model to fill.
"""

from __future__ import annotations

import re

from textwm.envs.alfworld.scene import listed
from textwm.envs.alfworld.tracker import MIDDLE, Tracker

NOTHING_HAPPENS = "Nothing happens."
HELP_TEXT = """Available commands:
  look:                             look around your current location
  inventory:                        check your current inventory
  go to (receptacle):               move to a receptacle
  open (receptacle):                open a receptacle
  close (receptacle):               close a receptacle
  take (object) from (receptacle):  take an object from a receptacle
  move (object) to (receptacle):  place an object in or on a receptacle
  examine (something):              examine a receptacle or an object
  use (object):                     use an object
  heat (object) with (receptacle):  heat an object using a receptacle
  clean (object) with (receptacle): clean an object using a receptacle
  cool (object) with (receptacle):  cool an object using a receptacle
  slice (object) with (object):     slice an object using a sharp object"""


def receptacle_view(t: Tracker, receptacle: str) -> str | None:
    """What examining ``receptacle`` shows (None: its contents are unknown)."""
    if t.is_closed(receptacle):
        return f"The {receptacle} is closed."
    if receptacle in t.unknown:
        return None
    items = listed(t.contents(receptacle))
    rec = t.scene.receptacle(receptacle)
    if rec is not None and rec.openable:
        return f"The {receptacle} is open. In it, you see {items}."
    return f"On the {receptacle}, you see {items}."


#: Tokens a listing slot may take (a receptacle of a dozen objects: "a mug 1, a fork 2, ... and a spoon 1").
LISTING_TOKENS = 64


def known_frame(t: Tracker, action: str) -> list | None:
    """The part of ``action``'s observation the state decides around an unknown receptacle's listing, as a
    ``response_template`` (its fixed text and a listing slot); None where :func:`respond` answers whole or the
    state decides nothing (the grammar's texts, as :func:`respond`'s)."""
    admissible = t.admissible()
    if admissible is None or action not in admissible:
        return None
    verb, _, rest = action.partition(" ")
    target = rest.removeprefix("to ") if verb == "go" else rest
    if verb not in ("go", "open", "examine") or target not in t.unknown or not t.is_receptacle(target):
        return None
    if verb == "open":
        return [f"You open the {target}. The {target} is open. In it, you see ", {"fill": LISTING_TOKENS}, "."]
    if t.is_closed(target):
        return None                       # "The X is closed.": respond() has it
    rec = t.scene.receptacle(target)
    view = (f"The {target} is open. In it, you see " if rec is not None and rec.openable
            else f"On the {target}, you see ")
    arrive = f"You arrive at {target}. " if verb == "go" else ""
    return [arrive + view, {"fill": LISTING_TOKENS}, "."]


#: An observation of :func:`known_frame`'s shape: its fixed text (group 1), the listing, the closing ".".
_FRAMED = re.compile(r"((?:You arrive at [^.]+\. |You open the [^.]+\. )?"
                     r"(?:On the [^,]+, you see |The [^.]+ is open\. In it, you see ))(.+)\.", re.DOTALL)


def observed_frame(observation: str) -> list[tuple[bool, str]] | None:
    """:func:`known_frame`'s frame read off an observation of its shape: ``[(False, fixed), (True, listing),
    (False, ".")]``; None for any other observation."""
    m = _FRAMED.fullmatch(observation)
    return None if m is None else [(False, m.group(1)), (True, m.group(2)), (False, ".")]


def object_view(t: Tracker, obj: str) -> str:
    states = t.states.get(obj, set())
    if t.scene.can(obj, "toggleable"):
        return f"This {obj} is {'on' if obj in t.toggled else 'off'}."
    if "clean" in states and "hot" in states:
        return f"This is a hot and clean {obj}."
    if "clean" in states and "cool" in states:
        return f"This is a cool and clean {obj}."
    for state, word in (("hot", "hot"), ("clean", "clean"), ("cool", "cold")):
        if state in states:
            return f"This is a {word} {obj}."
    return f"There's nothing special about {obj}."


def respond(t: Tracker, action: str) -> str | None:
    """The game's observation of ``action`` from the tracked state, None when the state does not decide it.

    Does not change the tracker: the caller applies the action once the observation is recorded."""
    admissible = t.admissible()
    if admissible is None:
        return None
    if action not in admissible:
        return NOTHING_HAPPENS
    verb, _, rest = action.partition(" ")
    if verb == "go":
        target = rest.removeprefix("to ")
        view = receptacle_view(t, target)
        return None if view is None else f"You arrive at {target}. {view}"
    if verb == "open":
        if rest in t.unknown:
            return None
        return f"You open the {rest}. The {rest} is open. In it, you see {listed(t.contents(rest))}."
    if verb == "close":
        return f"You close the {rest}."
    if verb == "take":
        obj, _, rec = rest.partition(" from ")
        return f"You pick up the {obj} from the {rec}."
    if verb == "move":
        obj, _, rec = rest.partition(" to ")
        return f"You move the {obj} to the {rec}."
    if verb in ("heat", "cool", "clean"):
        obj, _, rec = rest.partition(" with ")
        return f"You {verb} the {obj} using the {rec}."
    if verb == "use":
        return f"You turn on the {rest}."  # the grammar tests isToggled after the action set it: always "on"
    if verb == "examine":
        return receptacle_view(t, rest) if t.is_receptacle(rest) else object_view(t, rest)
    if action == "inventory":
        return f"You are carrying: a {t.holding}." if t.holding else "You are not carrying anything."
    if action == "look":
        if t.location is MIDDLE:
            return "You are in the middle of a room. Looking quickly around you, you see nothing."
        return f"You are facing the {t.location}. Next to it, you see nothing."
    if action == "help":
        return HELP_TEXT
    return None
