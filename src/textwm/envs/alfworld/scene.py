"""An ALFWorld game as plain data: the goal, the receptacles, where every object starts, what objects can do.

A :class:`Scene` is what the game builder writes into a PDDL problem, what the simulator's tracker
starts from (``sim_task``), and what the WM system prompt shows (in the paper's format: ``Task:``,
``Task type:``, ``Goal predicates:``, ``## INITIAL SCENE``, ``## INITIAL OBJECT LOCATIONS``).

Names are ALFWorld's demangled ones (``cabinet 3``, ``soapbottle 1``): a class in lower case and an
instance number. Listing order is the game's: by class, then by falling number (``cabinet 2, cabinet 1``),
which is how textworld lists what it shows (receptacles on arrival, contents, the welcome text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: Classes a receptacle of which can be opened (ALFWorld's ``OPENABLE_CLASS_LIST``, lower case).
OPENABLE_CLASSES = frozenset({"fridge", "cabinet", "microwave", "drawer", "safe", "box"})
#: Object abilities a scene records per object class (the PDDL facts of the same names).
ABILITIES = ("pickupable", "cleanable", "heatable", "coolable", "toggleable", "sliceable")

_NAME_RE = re.compile(r"^([a-z]+) (\d+)$")


def split_name(name: str) -> tuple[str, int]:
    """``"cabinet 12"`` -> ``("cabinet", 12)``; ValueError for anything else."""
    m = _NAME_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not an ALFWorld name ('<class> <number>', e.g. 'cabinet 3')")
    return m.group(1), int(m.group(2))


def class_of(name: str) -> str:
    return split_name(name)[0]


def listing_order(names: Iterable[str]) -> list[str]:
    """The game's order: by class, then by falling instance number."""
    def key(name: str) -> tuple[str, int]:
        cls, num = split_name(name)
        return cls, -num

    return sorted(names, key=key)


def listed(names: Iterable[str]) -> str:
    """textworld's list of things: ``a apple 3, a apple 1, and a mug 1`` (``nothing`` when empty)."""
    items = [f"a {n}" for n in listing_order(names)]
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


@dataclass(frozen=True)
class Goal:
    task_type: str
    #: The goal text after "Your task is to: " (no final period), e.g. ``clean some ladle and put it in cabinet``.
    text: str
    #: Object class to act on (``ladle``).
    target: str
    #: Receptacle class to put it in (``cabinet``); empty for ``look_at_obj_in_light``.
    destination: str = ""
    mrecep: str = ""
    #: The light to use (``desklamp``) for ``look_at_obj_in_light``.
    toggle: str = ""

    @property
    def needs(self) -> tuple[str, ...]:
        """The paper's ``needs_*`` flags of this task type."""
        return {"pick_clean_then_place_in_recep": ("clean",), "pick_heat_then_place_in_recep": ("heat",),
                "pick_cool_then_place_in_recep": ("cool",), "pick_two_obj_and_place": ("two",),
                "look_at_obj_in_light": ("toggle",)}.get(self.task_type, ())

    def predicates_line(self) -> str:
        """The paper's ``Goal predicates:`` line."""
        parts = [f"target={self.target}", f"destination={self.destination}"]
        if self.mrecep:
            parts.append(f"mrecep={self.mrecep}")
        if self.toggle:
            parts.append(f"toggle={self.toggle}")
        parts += [f"needs_{need}=true" for need in self.needs]
        return "Goal predicates: " + ", ".join(parts)


@dataclass(frozen=True)
class Receptacle:
    name: str
    openable: bool
    opened: bool = False
    #: False where the row that described the scene did not know its contents (the simulator then asks the WM).
    contents_known: bool = True

    @property
    def closed(self) -> bool:
        return self.openable and not self.opened


@dataclass
class Scene:
    goal: Goal
    #: Every receptacle, in the game's listing order.
    receptacles: list[Receptacle]
    #: Object name -> the receptacle it starts in.
    objects: dict[str, str]
    #: Object class -> its abilities (a subset of :data:`ABILITIES`).
    abilities: dict[str, list[str]]
    #: Receptacle class -> the object classes it can hold (the PDDL ``canContain`` facts; placing needs one).
    can_contain: dict[str, list[str]]
    #: Floor plan number (``FloorPlan<n>`` of THOR/ALFRED), 0 when unknown.
    floor_plan: int = 0
    #: What made the scene: ``generated``, ``row`` (rebuilt from a paper row), ``game`` (read from a game file).
    origin: str = "generated"
    #: Notes on what a rebuild had to add (e.g. a target object a row did not locate).
    notes: list[str] = field(default_factory=list)
    #: The WM prompt layout of the rows built with it (``scene`` or ``paper``): it travels with the task, so the
    #: simulator queries the world model as its rows were written (``$ALFWORLD_WM_PROMPT`` overrides it).
    wm_prompt: str = "scene"

    def __post_init__(self) -> None:
        names = [r.name for r in self.receptacles]
        if len(set(names)) != len(names):
            raise ValueError("a scene names a receptacle twice")
        self.receptacles = [next(r for r in self.receptacles if r.name == n) for n in listing_order(names)]
        known = set(names)
        for obj, where in self.objects.items():
            split_name(obj)
            if where not in known:
                raise ValueError(f"object {obj!r} is in {where!r}, which is not a receptacle of the scene")

    # --- queries ----------------------------------------------------------------------------------------

    def receptacle(self, name: str) -> Receptacle | None:
        return next((r for r in self.receptacles if r.name == name), None)

    def contents(self, receptacle: str) -> list[str]:
        return listing_order(o for o, r in self.objects.items() if r == receptacle)

    def can(self, obj: str, ability: str) -> bool:
        return ability in self.abilities.get(class_of(obj), ())

    def holds(self, receptacle: str, obj: str) -> bool:
        """Whether ``obj`` may be put in ``receptacle`` (canContain)."""
        return class_of(obj) in self.can_contain.get(class_of(receptacle), ())

    # --- the paper's WM system prompt -------------------------------------------------------------------

    def wm_system_prompt(self) -> str:
        """The paper's ``wm_system_prompt``: task, goal predicates, initial scene, initial object locations."""
        lines = [f"Task: {self.goal.text}.", f"Task type: {self.goal.task_type}", self.goal.predicates_line(), "",
                 "## INITIAL SCENE"]
        lines += [f"- {r.name} ({'closed' if r.closed else 'open'})" for r in self.receptacles]
        lines += ["", "## INITIAL OBJECT LOCATIONS"]
        # Receptacles whose contents the row did not give stay without them (a rebuild's additions are not shown).
        located = [(o, r) for r in self.receptacles if r.contents_known for o in self.contents(r.name)]
        if not located:
            lines.append("(no objects observed in any visited receptacle)")
        for obj, rec in located:
            lines.append(f"- {obj}: {'in' if rec.closed else 'on'} {rec.name}")
        return "\n".join(lines)

    # --- plain data -------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Scene:
        d = dict(d)
        d["goal"] = Goal(**d["goal"])
        d["receptacles"] = [Receptacle(**r) for r in d["receptacles"]]
        d["objects"] = dict(d["objects"])
        d["abilities"] = {k: list(v) for k, v in d["abilities"].items()}
        d["can_contain"] = {k: list(v) for k, v in d["can_contain"].items()}
        d["notes"] = list(d.get("notes", []))
        return cls(**d)
