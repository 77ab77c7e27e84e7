"""Solvable ALFWorld games offline: scenes sampled from the floor plans alfworld ships, for all six task types.

A scene takes a floor plan's receptacles (``FloorPlan<n>-openable.json``: their THOR ids, numbered the
way ALFWorld's demangler numbers them) and its object classes (``-objects.json``); it places one to
three instances of each pickupable class in receptacles that can hold them (ALFRED's
``VAL_RECEPTACLE_OBJECTS``), desk lamps on tables, and samples a goal that the room affords (ALFRED's
``GOALS_VALID`` room types, a microwave to heat, a fridge to cool, a sink to clean, two instances for
"two", a lamp to look under), no target starting where the goal wants it. The goal text is one of
ALFWorld's templates.

Splits are by floor plan, like ALFWorld's ``valid_unseen``: a fixed, seeded tenth of the floor plans of
each room type is held out for ``eval_out_of_distribution``; ``train`` and ``eval_in_distribution`` share
the others (different games). A game is kept when the handcoded expert wins it, which is ALFWorld's own
``solvable`` rule (``alfworld-generate``); how many were dropped is reported.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from textwm.envs.alfworld import alfred
from textwm.envs.alfworld.alfred import abilities_and_containers
from textwm.envs.alfworld.scene import OPENABLE_CLASSES, Goal, Receptacle, Scene, listing_order

SPLITS = ("train", "eval_in_distribution", "eval_out_of_distribution")
ROOM_TYPES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
              "Bathroom": range(401, 431)}
#: Floor plans of each room type held out for eval_out_of_distribution.
OOD_PER_ROOM_TYPE = 3
#: Where a desk lamp stands (the look-at-in-light goal needs it in a receptacle at the agent's location).
LAMP_RECEPTACLES = ("sidetable", "desk", "dresser", "shelf", "coffeetable", "diningtable", "countertop")
#: Instances of a receptacle class the floor plan lists as present but gives no position for.
UNPLACED_RECEPTACLE_COUNT = {"stoveburner": (2, 4)}
APPLIANCE = {"pick_clean_then_place_in_recep": ("sinkbasin", "cleanable"),
             "pick_heat_then_place_in_recep": ("microwave", "heatable"),
             "pick_cool_then_place_in_recep": ("fridge", "coolable")}
OPENED_FRACTION = 0.2
#: Share of a floor plan's other object classes a scene keeps.
KEEP_CLASS_FRACTION = 0.6


def room_type(floor_plan: int) -> str:
    return next(name for name, numbers in ROOM_TYPES.items() if floor_plan in numbers)


def split_floor_plans(seed: int = 0) -> dict[str, list[int]]:
    """``{"seen": [...], "unseen": [...]}``: the floor plans of train / eval-ID and those of eval-OOD."""
    rng = random.Random(f"alfworld-floor-plans-{seed}")
    plans = alfred.floor_plans()
    unseen: list[int] = []
    for numbers in ROOM_TYPES.values():
        unseen += rng.sample([p for p in plans if p in numbers], OOD_PER_ROOM_TYPE)
    return {"seen": [p for p in plans if p not in unseen], "unseen": sorted(unseen)}


def thor_name_class(thor_id: str) -> str:
    """``Sink|+00.1|...|SinkBasin`` -> ``sinkbasin``; ``Cabinet|...`` -> ``cabinet``."""
    parts = thor_id.split("|")
    return (parts[-1] if len(parts) > 4 else parts[0]).lower()


def _receptacles(floor_plan: int, rng: random.Random) -> list[Receptacle]:
    ids, classes = alfred.floor_plan(floor_plan)
    c = alfred.constants()
    movable = {m.lower() for m in c.MOVABLE_RECEPTACLES}
    receptacle_classes = {r.lower() for r in c.RECEPTACLES} - movable
    counts = Counter(thor_name_class(i) for i in ids if thor_name_class(i) in receptacle_classes)
    for cls in {k.lower() for k in classes} & receptacle_classes - set(counts):
        counts[cls] = rng.randint(*UNPLACED_RECEPTACLE_COUNT.get(cls, (1, 1)))
    out = []
    for cls, n in counts.items():
        for num in range(1, n + 1):
            openable = cls in OPENABLE_CLASSES
            out.append(Receptacle(f"{cls} {num}", openable=openable, opened=openable and rng.random() < OPENED_FRACTION))
    return out


def can_host(task_type: str, floor_plan: int) -> bool:
    """Whether a floor plan has what the task type needs (its room type, a lamp, the appliance)."""
    if room_type(floor_plan) not in alfred.constants().GOALS_VALID[task_type]:
        return False
    ids, classes = alfred.floor_plan(floor_plan)
    present = {thor_name_class(i) for i in ids} | {c.lower() for c in classes}
    if task_type == "look_at_obj_in_light":
        return "desklamp" in present
    return task_type not in APPLIANCE or APPLIANCE[task_type][0] in present


@dataclass(frozen=True)
class GameSpec:
    task_type: str
    floor_plan: int
    seed: int


def sample_scene(spec: GameSpec) -> Scene | None:
    """A scene for ``spec`` (None when the floor plan cannot host the task type)."""
    rng = random.Random(f"{spec.seed}-{spec.floor_plan}-{spec.task_type}")
    if room_type(spec.floor_plan) not in alfred.constants().GOALS_VALID[spec.task_type]:
        return None
    receptacles = _receptacles(spec.floor_plan, rng)
    rclasses = {r.name.split()[0] for r in receptacles}
    _, thor_classes = alfred.floor_plan(spec.floor_plan)
    upper = alfred.class_names()
    oclasses = {k.lower() for k in thor_classes if k.lower() in upper} - rclasses - {"floorlamp"}
    abilities, containers = abilities_and_containers(oclasses | {"desklamp"}, rclasses)
    pickable = sorted(o for o in oclasses if "pickupable" in abilities[o] and any(o in v for v in containers.values()))
    goal = _sample_goal(spec.task_type, pickable, abilities, containers, rclasses, "desklamp" in oclasses, rng)
    if goal is None:
        return None
    objects: dict[str, str] = {}
    # About the size of ALFRED's scenes (~25 objects): a game's grounding, hence its load and step time,
    # grows with objects x receptacles.
    kept = [c for c in pickable if c == goal.target or rng.random() < KEEP_CLASS_FRACTION]
    for cls in kept:
        if cls == goal.target:
            n = rng.randint(2, 3) if spec.task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
        else:
            n = rng.choice((1, 1, 2, 3))
        homes = [r.name for r in receptacles if cls in containers[r.name.split()[0]]
                 and r.name.split()[0] != goal.destination]  # no target starts where the goal wants it
        if not homes:
            if cls == goal.target:
                return None
            continue
        for num in range(1, n + 1):
            objects[f"{cls} {num}"] = rng.choice(homes)
    if goal.toggle:
        stands = [r.name for r in receptacles if r.name.split()[0] in LAMP_RECEPTACLES]
        if not stands:
            return None
        objects["desklamp 1"] = rng.choice(stands)
    present = {o.split()[0] for o in objects}
    abilities = {k: v for k, v in abilities.items() if k in present}
    containers = {k: [o for o in v if o in present] for k, v in containers.items()}
    return Scene(goal, receptacles, dict(sorted(objects.items(), key=lambda kv: listing_order([kv[0]]))), abilities,
                 containers, floor_plan=spec.floor_plan, origin="generated")


def _sample_goal(task_type: str, pickable: list[str], abilities: dict[str, list[str]],
                 containers: dict[str, list[str]], rclasses: set[str], has_lamp: bool, rng: random.Random) -> Goal | None:
    templates = alfred.goal_templates(task_type)
    if task_type == "look_at_obj_in_light":
        if not has_lamp or not pickable:
            return None
        target = rng.choice(pickable)
        return Goal(task_type, rng.choice(templates).format(obj=target, toggle="desklamp", recep="", mrecep=""),
                    target, "", toggle="desklamp")
    needed = APPLIANCE.get(task_type)
    if needed and needed[0] not in rclasses:
        return None
    candidates = [o for o in pickable if needed is None or needed[1] in abilities[o]]
    rng.shuffle(candidates)
    for target in candidates:
        destinations = sorted(r for r in rclasses if target in containers[r] and (needed is None or r != needed[0]))
        homes = [r for r in rclasses if target in containers[r]]
        if destinations and len(homes) > 1:
            dest = rng.choice(destinations)
            return Goal(task_type, rng.choice(templates).format(obj=target, recep=dest, toggle="", mrecep=""),
                        target, dest)
    return None
