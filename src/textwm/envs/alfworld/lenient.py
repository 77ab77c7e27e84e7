"""The paper's lenient reading of ALFWorld commands, for the simulator only (``ALFWORLD_LENIENT_ACTIONS=1``).

The real game admits its own grammar only: ``take O from R``, ``move O to R``, numbered names. The paper's plugin
also read ``put O in R`` / ``put O on R`` / ``put O in/on R`` as a move, ``take O`` with no source and ``move O``
with no destination as here, and a name without its number as the first one of that class in reach. A world model
trained with that plugin (and an agent trained in it) expects those readings; the real game answers "Nothing
happens." to them, so they are off by default and change what the simulator accepts when on.
:func:`canonical_action` rewrites such a command into the game's grammar from the tracked state; a command it
cannot resolve is returned as it came (and the responder then answers as the game would).
"""

from __future__ import annotations

import os
import re

from textwm.envs.alfworld.tracker import MIDDLE, Tracker

LENIENT_ENV = "ALFWORLD_LENIENT_ACTIONS"

_TAKE = re.compile(r"^take (?P<obj>[\w ]+?)(?: from (?P<src>[\w ]+?))?$")
_PUT = re.compile(r"^(?:put|move) (?P<obj>[\w ]+?)(?: (?:in/on|in|on|to) (?P<dst>[\w ]+?))?$")
_NUMBERED = re.compile(r"^[\w ]+ \d+$")
_ARTICLE = re.compile(r"^(?:the|a|an) ")


def lenient_enabled() -> bool:
    value = os.environ.get(LENIENT_ENV, "0").strip().lower()
    if value not in ("0", "1", "false", "true", "no", "yes", ""):
        raise ValueError(f"${LENIENT_ENV}={value!r}: use 1 (the paper's lenient reading) or 0 (the game's grammar)")
    return value in ("1", "true", "yes")


def _resolve(name: str, candidates: list[str]) -> str | None:
    """A name as given if it is one of ``candidates``; a class-only name as the first candidate of that class."""
    name = _ARTICLE.sub("", name.strip())
    if name in candidates:
        return name
    if _NUMBERED.match(name):
        return None
    return next((c for c in candidates if c.startswith(name + " ")), None)


def canonical_action(t: Tracker, action: str) -> str:
    """``action`` in the game's grammar where the lenient reading resolves it (else unchanged)."""
    a = " ".join(action.strip().rstrip(".").lower().split())
    here = t.location
    take, put = _TAKE.match(a), _PUT.match(a)
    if take and (take.group("src") is None or not _NUMBERED.match(take.group("obj"))):
        source = _ARTICLE.sub("", take.group("src") or "") or here
        if source is MIDDLE or source != here:
            return action
        obj = _resolve(take.group("obj"), t.visible_here())
        return f"take {obj} from {source}" if obj else action
    if put and (not a.startswith("move ") or put.group("dst") is None):
        target = _ARTICLE.sub("", put.group("dst") or "") or here
        held = [t.holding] if t.holding else []
        obj = _resolve(put.group("obj"), held)
        return f"move {obj} to {target}" if obj and target is not MIDDLE else action
    return action
