"""The state of an ALFWorld episode, tracked from its :class:`~textwm.envs.alfworld.scene.Scene` and its steps.

The rules are the ``alfred`` PDDL domain's (what each action needs and changes) and the TWL2 grammar's
(the admissible-command templates): the tracker knows where the agent is, what it holds, where every
object is, what is open, what was heated / cooled / cleaned / switched on. ALFWorld answers every
command that is not admissible with "Nothing happens." and every admissible one deterministically,
so wherever the tracked state is complete the next observation follows from it
(:mod:`~textwm.envs.alfworld.responder`).

The state is complete except for receptacles whose contents the row did not give (``contents_known``
False: a paper row's receptacle that started open). Their contents are learnt from the first
observation that lists them (a world-model answer to ``go to`` / ``open`` / ``examine``); until then the
tracker says it does not know, and the simulator asks the world model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.alfworld.scene import Scene, class_of, split_name

MIDDLE = None  # the agent's location before its first "go to": the middle of the room
_SEEN_RE = re.compile(r"(?:In it|On the [a-z]+ \d+), you see (.+?)\.$")
_ITEM_RE = re.compile(r"^an? ([a-z]+ \d+)$")


def parse_listed(text: str) -> list[str] | None:
    """``a apple 1, a mug 2, and a cup 1`` -> names; ``nothing`` -> []; None when it is not such a list."""
    if text == "nothing":
        return []
    parts = [p.strip() for p in re.split(r", and |, | and ", text)]
    names = []
    for part in parts:
        m = _ITEM_RE.match(part)
        if not m:
            return None
        names.append(m.group(1))
    return names


@dataclass
class Tracker:
    scene: Scene
    location: str | None = MIDDLE
    holding: str | None = None
    #: Object -> the receptacle it is in (a held object is in none).
    where: dict[str, str] = field(default_factory=dict)
    opened: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    #: Object -> its states among hot, cool, clean (PDDL isHot / isCool / isClean).
    states: dict[str, set[str]] = field(default_factory=dict)
    toggled: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, scene: Scene) -> Tracker:
        return cls(scene=scene, where=dict(scene.objects), opened={r.name for r in scene.receptacles if r.opened},
                   unknown={r.name for r in scene.receptacles if not r.contents_known})

    # --- queries ----------------------------------------------------------------------------------------

    def is_receptacle(self, name: str) -> bool:
        return self.scene.receptacle(name) is not None

    def is_closed(self, receptacle: str) -> bool:
        r = self.scene.receptacle(receptacle)
        return r is not None and r.openable and receptacle not in self.opened

    def contents(self, receptacle: str) -> list[str]:
        return [o for o, r in self.where.items() if r == receptacle]

    def visible_here(self) -> list[str]:
        """Objects in the receptacle the agent is at, when it is not closed."""
        if self.location is MIDDLE or self.is_closed(self.location):
            return []
        return self.contents(self.location)

    def knows_here(self) -> bool:
        return self.location is MIDDLE or self.location not in self.unknown or self.is_closed(self.location)

    def admissible(self) -> list[str] | None:
        """The commands the game accepts now, sorted as ALFWorld lists them; None while what is here is unknown."""
        if not self.knows_here():
            return None
        cmds = {"help", "inventory", "look"}
        cmds |= {f"go to {r.name}" for r in self.scene.receptacles if r.name != self.location}
        here = self.location
        if here is not MIDDLE:
            cmds.add(f"examine {here}")
            rec = self.scene.receptacle(here)
            if rec is not None and rec.openable:
                cmds.add(f"close {here}" if here in self.opened else f"open {here}")
            visible = self.visible_here()
            if self.holding is None:
                cmds |= {f"take {o} from {here}" for o in visible if self.scene.can(o, "pickupable")}
            else:
                held = self.holding
                if not self.is_closed(here) and self.scene.holds(here, held):
                    cmds.add(f"move {held} to {here}")
                for verb, ability, appliance in (("heat", "heatable", "microwave"), ("cool", "coolable", "fridge"),
                                                 ("clean", "cleanable", "sinkbasin")):
                    if class_of(here) == appliance and self.scene.can(held, ability):
                        cmds.add(f"{verb} {held} with {here}")
            cmds |= {f"use {o}" for o in self.contents(here) if self.scene.can(o, "toggleable")}
        if self.holding is not None:
            cmds.add(f"examine {self.holding}")
        return sorted(cmds)

    # --- changes ----------------------------------------------------------------------------------------

    def apply(self, action: str) -> None:
        """Apply an admissible ``action`` (the caller checked it is admissible)."""
        verb, _, rest = action.partition(" ")
        if verb == "go":
            self.location = rest.removeprefix("to ")
        elif verb == "open":
            self.opened.add(rest)
        elif verb == "close":
            self.opened.discard(rest)
        elif verb == "take":
            obj = rest.split(" from ", 1)[0]
            self.where.pop(obj, None)
            self.holding = obj
        elif verb == "move":
            obj, _, dest = rest.partition(" to ")
            self.where[obj] = dest
            self.holding = None
        elif verb in ("heat", "cool", "clean"):
            obj = rest.split(" with ", 1)[0]
            states = self.states.setdefault(obj, set())
            new = {"heat": "hot", "cool": "cool", "clean": "clean"}[verb]
            states.discard({"hot": "cool", "cool": "hot"}.get(new, ""))
            states.add(new)
        elif verb == "use":
            self.toggled.add(rest)

    def observe(self, action: str, observation: str) -> None:
        """Record an answered step: an admissible action the answer did not refuse changes the state, and an
        answer that lists an unknown receptacle's contents makes them known."""
        admissible = self.admissible()
        if admissible is not None and action in admissible and observation.strip() != "Nothing happens.":
            self.apply(action)
        self.learn(action, observation)

    def learn(self, action: str, observation: str) -> None:
        """Learn the contents of an unknown receptacle from an observation that lists them."""
        target = None
        verb, _, rest = action.partition(" ")
        if verb in ("go", "open", "examine"):
            target = rest.removeprefix("to ")
        if target not in self.unknown:
            return
        m = _SEEN_RE.search(observation.strip())
        names = parse_listed(m.group(1)) if m else None
        if names is None:
            return
        for name in names:
            try:
                split_name(name)
            except ValueError:
                return
        # The observation is the truth about this receptacle: what a rebuild put there but it does not show is gone.
        for obj in [o for o, r in self.where.items() if r == target and o not in names]:
            del self.where[obj]
        for name in names:
            self.where[name] = target
        self.unknown.discard(target)

    # --- plain data -------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"scene": self.scene.to_dict(), "location": self.location, "holding": self.holding,
                "where": dict(self.where), "opened": sorted(self.opened), "unknown": sorted(self.unknown),
                "states": {k: sorted(v) for k, v in self.states.items()}, "toggled": sorted(self.toggled)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tracker:
        return cls(scene=Scene.from_dict(d["scene"]), location=d["location"], holding=d["holding"],
                   where=dict(d["where"]), opened=set(d["opened"]), unknown=set(d["unknown"]),
                   states={k: set(v) for k, v in d["states"].items()}, toggled=set(d["toggled"]))
