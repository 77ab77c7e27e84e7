"""A :class:`~textwm.envs.alfworld.scene.Scene` written as a real ALFWorld game: ``game.tw-pddl`` + ``traj_data.json``.

The game is what ``alfworld-generate`` writes from an ALFRED trajectory — the ``alfred`` PDDL domain,
the TWL2 grammar with the goal text, a PDDL problem — so it plays through textworld's ``PddlEnv``
with ALFWorld's wrappers, text and handcoded expert exactly like a downloaded game.

Object ids follow THOR's form (``Cabinet|+01.00|+00.00|+00.00``, mangled to ``Cabinet_bar__plus_01...``).
ALFWorld's demangler numbers the instances of a class by sorting their ids and handing out numbers
from the top (the first id gets the highest number), so an instance numbered ``k`` of ``n`` gets the
id whose rank is ``n - k``: the game then shows exactly the scene's names.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from textwm.data.jsonl import write_json
from textwm.envs.alfworld import alfred
from textwm.envs.alfworld.scene import Scene, split_name

GAME_FILE, TRAJ_FILE = "game.tw-pddl", "traj_data.json"


def mangle(thor_id: str) -> str:
    """THOR id -> PDDL constant (``|`` -> ``_bar_``, ``+`` -> ``_plus_``, ...), as ALFWorld's games spell them."""
    for old, new in (("|", "_bar_"), ("-", "_minus_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        thor_id = thor_id.replace(old, new)
    return thor_id


def thor_class(name_class: str) -> str:
    """ALFWorld class name -> THOR class (``sinkbasin`` -> ``SinkBasin``); KeyError names an unknown class."""
    try:
        return alfred.class_names()[name_class]
    except KeyError:
        raise KeyError(f"{name_class!r} is not an ALFWorld object or receptacle class") from None


def instance_ids(names: list[str]) -> dict[str, str]:
    """A PDDL constant per name such that ALFWorld's demangler gives every one its own number back."""
    by_class: dict[str, list[int]] = defaultdict(list)
    for name in names:
        cls, num = split_name(name)
        by_class[cls].append(num)
    ids = {}
    for cls, nums in by_class.items():
        if sorted(nums) != list(range(1, len(nums) + 1)):
            raise ValueError(f"instances of {cls!r} must be numbered 1..{len(nums)}, got {sorted(nums)}")
        thor = thor_class(cls)
        for num in nums:
            position = f"+{len(nums) - num:02d}.00|+00.00|+00.00"
            # THOR names a basin after its sink ("Sink|...|SinkBasin"); the demangler appends "basin" itself.
            ids[f"{cls} {num}"] = mangle(f"{thor[:-5]}|{position}|{thor}" if thor.endswith("Basin") else f"{thor}|{position}")
    return ids


def goal_pddl(scene: Scene) -> str:
    """The PDDL goal of the scene's task type (ALFWorld's goal semantics, one formula per type)."""
    g = scene.goal
    obj = f"{thor_class(g.target)}Type"
    if g.task_type == "look_at_obj_in_light":
        lamp = f"{thor_class(g.toggle)}Type"
        return (f"(:goal (and (exists (?t - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?t {lamp}) "
                "(toggleable ?t) (isToggled ?t) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?t ?r))) "
                f"(exists (?o - object ?a - agent) (and (objectType ?o {obj}) (holds ?a ?o)))))")
    rec = f"{thor_class(g.destination)}Type"
    if g.task_type == "pick_two_obj_and_place":
        return (f"(:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and (not (= ?o1 ?o2)) "
                f"(objectType ?o1 {obj}) (objectType ?o2 {obj}) (receptacleType ?r {rec}) "
                "(inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r))))")
    state = {"pick_clean_then_place_in_recep": "(isClean ?o)", "pick_heat_then_place_in_recep": "(isHot ?o)",
             "pick_cool_then_place_in_recep": "(isCool ?o)", "pick_and_place_simple": ""}[g.task_type]
    return (f"(:goal (exists (?r - receptacle ?o - object) (and (objectType ?o {obj}) (receptacleType ?r {rec}) "
            f"(inReceptacle ?o ?r) {state})))")


def pddl_problem(scene: Scene) -> str:
    """The scene as a PDDL problem of the ``alfred`` domain. No ``distance`` facts: with them Fast Downward
    simplifies the task away and textworld fails with ``KeyError 'val1'``."""
    rec_ids = instance_ids([r.name for r in scene.receptacles])
    obj_ids = instance_ids(list(scene.objects))
    loc = {r.name: f"loc_{i}" for i, r in enumerate(scene.receptacles)}
    decl = ["agent1 - agent", "loc_start - location", *(f"{v} - location" for v in loc.values())]
    decl += [f"{i} - receptacle" for i in rec_ids.values()] + [f"{i} - object" for i in obj_ids.values()]
    otypes = sorted({thor_class(split_name(o)[0]) for o in scene.objects} | {thor_class(scene.goal.target)})
    rtypes = sorted({thor_class(split_name(r.name)[0]) for r in scene.receptacles})
    decl += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    if scene.goal.toggle and thor_class(scene.goal.toggle) not in otypes:
        decl.append(f"{thor_class(scene.goal.toggle)}Type - otype")
    init = ["(atLocation agent1 loc_start)"]
    for r in scene.receptacles:
        rid = rec_ids[r.name]
        init += [f"(receptacleType {rid} {thor_class(split_name(r.name)[0])}Type)", f"(receptacleAtLocation {rid} {loc[r.name]})"]
        if r.openable:
            init.append(f"(openable {rid})")
        if r.opened:
            init.append(f"(opened {rid})")
    for obj, where in scene.objects.items():
        oid, cls = obj_ids[obj], split_name(obj)[0]
        init += [f"(objectType {oid} {thor_class(cls)}Type)", f"(objectAtLocation {oid} {loc[where]})",
                 f"(inReceptacle {oid} {rec_ids[where]})"]
        init += [f"({ability} {oid})" for ability in scene.abilities.get(cls, ())]
    present = {split_name(o)[0] for o in scene.objects}
    for rcls in sorted({split_name(r.name)[0] for r in scene.receptacles}):
        init += [f"(canContain {thor_class(rcls)}Type {thor_class(ocls)}Type)"
                 for ocls in scene.can_contain.get(rcls, ()) if ocls in present]
    body = "\n        ".join(decl)
    facts = "\n        ".join(init)
    return (f"(define (problem alfworld_{scene.goal.task_type})\n    (:domain alfred)\n    (:objects\n        {body}\n    )\n"
            f"    (:init\n        {facts}\n    )\n    {goal_pddl(scene)}\n)\n")


def traj_data(scene: Scene) -> dict[str, Any]:
    """The ``traj_data.json`` the handcoded expert reads (``task_type``, ``pddl_params``), plus the scene."""
    g = scene.goal
    params = {"object_target": thor_class(g.target), "parent_target": thor_class(g.destination) if g.destination else "",
              "toggle_target": thor_class(g.toggle) if g.toggle else "",
              "mrecep_target": thor_class(g.mrecep) if g.mrecep else "", "object_sliced": False}
    return {"task_type": g.task_type, "pddl_params": params, "scene": {"floor_plan": scene.floor_plan},
            "textwm_scene": scene.to_dict()}


def write_game(scene: Scene, game_dir: str | Path, *, walkthrough: list[str] | None = None) -> Path:
    """Write ``game.tw-pddl`` and ``traj_data.json`` of ``scene`` into ``game_dir``; returns the game file."""

    domain, grammar = alfred.domain_and_grammar()
    game_dir = Path(game_dir)
    game_dir.mkdir(parents=True, exist_ok=True)
    write_json(game_dir / TRAJ_FILE, traj_data(scene))
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", scene.goal.text),
            "pddl_problem": pddl_problem(scene), "solvable": walkthrough is not None, "walkthrough": walkthrough}
    write_json(game_dir / GAME_FILE, game)
    return game_dir / GAME_FILE


def read_scene(game_dir: str | Path) -> Scene | None:
    """The scene a game of ours was written from (None for a game that is not ours: a downloaded one)."""
    path = Path(game_dir) / TRAJ_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Scene.from_dict(data["textwm_scene"]) if "textwm_scene" in data else None
