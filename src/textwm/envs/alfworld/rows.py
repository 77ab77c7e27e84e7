"""RL task rows of ALFWorld: the paper's format, read as they are, and a :class:`Scene` from each.

A paper row (``alfworld_rl.jsonl``) has ``messages`` (agent prompt + first observation), the goal fields
(``task_type``, ``target_obj``, ``destination``, ``mrecep``, ``toggle_target``), ``wm_system_prompt`` (goal
predicates, ``## INITIAL SCENE``, ``## INITIAL OBJECT LOCATIONS``), ``init_admissible``, ``expert_plan`` and a
``game_file`` path on the authors' machine. Rows this project writes add ``task_id`` and ``sim_task`` (the
scene as JSON).

The scene of a paper row is read from its WM prompt. The paper built it by walking every receptacle:
a closed one was opened and its contents listed ("in"), an open one was read from its "On the X, you
see ..." text ("on"). A receptacle of an openable class that started open has an "In it, you see"
text the walk did not read, so it shows as "(open)" with no contents (82 of the 146 fridges): its
contents are unknown (``contents_known`` False; the simulator asks the world model, a rebuilt game
leaves it empty). A "(closed)" receptacle is openable; an "(open)" one with contents listed "on" is
not. Objects a rebuilt game needs but the row does not locate (a target in an unread fridge, a missing
instance number) are put in a receptacle that can hold them, preferring the unread ones, and noted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from textwm.data.jsonl import DataError
from textwm.envs.alfworld.alfred import TASK_TYPES, abilities_and_containers, class_names
from textwm.envs.alfworld.scene import OPENABLE_CLASSES, Goal, Receptacle, Scene, class_of, split_name

_SCENE_LINE = re.compile(r"^- ([a-z]+ \d+) \((open|closed)\)$")
_OBJECT_LINE = re.compile(r"^- ([a-z]+ \d+): (in|on) ([a-z]+ \d+)$")
_FLOOR_PLAN = re.compile(r"-(\d+)$")


def task_id_from_game_file(game_file: str) -> str:
    """``.../json_2.1.1/train/<task folder>/<trial>/game.tw-pddl`` -> ``train/<task folder>/<trial>``."""
    parts = PurePosixPath(game_file).parts
    if parts and parts[-1].endswith(".tw-pddl"):
        parts = parts[:-1]
    if "json_2.1.1" in parts:
        parts = parts[parts.index("json_2.1.1") + 1:]
    else:
        parts = parts[-3:]
    if not parts:
        raise DataError(f"game_file {game_file!r} names no game folder", field="game_file")
    return "/".join(parts)


def floor_plan_of(task_id: str) -> int:
    """The floor plan in a task folder name (``pick_and_place_simple-Mug-None-Cabinet-10/...`` -> 10), 0 if none."""
    parts = task_id.split("/")
    folder = parts[-2] if len(parts) >= 2 else parts[0]
    m = _FLOOR_PLAN.search(folder)
    return int(m.group(1)) if m else 0


def _section(prompt: str, title: str) -> list[str]:
    lines = prompt.splitlines()
    try:
        start = lines.index(title) + 1
    except ValueError:
        raise DataError(f"has no '{title}' section", field="wm_system_prompt") from None
    out = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if line.strip():
            out.append(line.strip())
    return out


def goal_of(row: Mapping[str, Any], prompt: str) -> Goal:
    task_type = row.get("task_type")
    if task_type not in TASK_TYPES:
        raise DataError(f"must be one of {', '.join(TASK_TYPES)}, got {task_type!r}", field="task_type")
    m = re.search(r"^Task: (.+?)\.?$", prompt, re.M)
    if not m:
        raise DataError("has no 'Task:' line", field="wm_system_prompt")
    target = row.get("target_obj") or ""
    if not target:
        raise DataError("is empty", field="target_obj")
    destination = row.get("destination") or ""
    toggle = row.get("toggle_target") or ""
    if task_type == "look_at_obj_in_light" and not toggle:
        raise DataError("a look_at_obj_in_light row needs its lamp", field="toggle_target")
    if task_type != "look_at_obj_in_light" and not destination:
        raise DataError(f"a {task_type} row needs a destination", field="destination")
    return Goal(task_type, m.group(1), target.lower(), destination.lower(), (row.get("mrecep") or "").lower(),
                toggle.lower())


def scene_from_row(row: Mapping[str, Any], task_id: str) -> Scene:
    """The scene of a paper row (see the module docstring); DataError naming the field when it is unreadable."""
    prompt = row.get("wm_system_prompt")
    if not isinstance(prompt, str) or not prompt:
        raise DataError("is missing: an ALFWorld row needs its scene", field="wm_system_prompt")
    goal = goal_of(row, prompt)
    states: dict[str, str] = {}
    for line in _section(prompt, "## INITIAL SCENE"):
        m = _SCENE_LINE.match(line)
        if not m:
            raise DataError(f"unreadable scene line {line!r} (expected '- cabinet 1 (open|closed)')",
                            field="wm_system_prompt")
        states[m.group(1)] = m.group(2)
    objects: dict[str, str] = {}
    for line in _section(prompt, "## INITIAL OBJECT LOCATIONS"):
        if line.startswith("(no objects"):
            continue
        m = _OBJECT_LINE.match(line)
        if not m or m.group(3) not in states:
            raise DataError(f"unreadable object line {line!r} (expected '- mug 1: in cabinet 3', a scene receptacle)",
                            field="wm_system_prompt")
        objects[m.group(1)] = m.group(3)
    if not states:
        raise DataError("lists no receptacle", field="wm_system_prompt")
    listed_on = set(objects.values())
    receptacles = []
    for name, state in states.items():
        cls = class_of(name)
        if state == "closed":
            receptacles.append(Receptacle(name, openable=True))
        elif cls in OPENABLE_CLASSES and name not in listed_on:
            receptacles.append(Receptacle(name, openable=True, opened=True, contents_known=False))
        else:
            receptacles.append(Receptacle(name, openable=False))
    known = class_names()
    classes = {class_of(o) for o in objects} | {goal.target} | ({goal.toggle} if goal.toggle else set())
    unknown_classes = sorted(c for c in classes | {class_of(r) for r in states} if c not in known)
    if unknown_classes:
        raise DataError(f"names classes ALFWorld does not have: {', '.join(unknown_classes)}", field="wm_system_prompt")
    abilities, containers = abilities_and_containers(classes, {class_of(r) for r in states})
    if goal.destination:
        containers.setdefault(goal.destination, [])
        if goal.target not in containers[goal.destination]:
            containers[goal.destination].append(goal.target)  # the goal itself says it can hold the target
    scene = Scene(goal, receptacles, objects, abilities, containers, floor_plan=floor_plan_of(task_id), origin="row")
    _complete(scene)
    return scene


def _complete(scene: Scene) -> None:
    """Add what a playable game needs and the row does not locate (noted in ``scene.notes``)."""
    counts: dict[str, int] = {}
    for obj in scene.objects:
        cls, num = split_name(obj)
        counts[cls] = max(counts.get(cls, 0), num)
    g = scene.goal
    wanted = {g.target: 2 if g.task_type == "pick_two_obj_and_place" else 1}
    if g.toggle:
        wanted[g.toggle] = 1
    for cls, n in wanted.items():
        counts[cls] = max(counts.get(cls, 0), n)
    unread = [r.name for r in scene.receptacles if not r.contents_known]
    for cls, top in sorted(counts.items()):
        for num in range(1, top + 1):
            name = f"{cls} {num}"
            if name in scene.objects:
                continue
            homes = [r for r in unread if cls in scene.can_contain.get(class_of(r), ())] or \
                    [r.name for r in scene.receptacles if cls in scene.can_contain.get(class_of(r.name), ())
                     and class_of(r.name) != g.destination] or [r.name for r in scene.receptacles]
            scene.objects[name] = homes[0]
            scene.notes.append(f"placed {name} in {homes[0]} (not located by the row)")


def sim_task_of(row: Mapping[str, Any], task_id: str) -> Scene:
    """The scene of any row: its ``sim_task`` (rows of this project) or the one read from the paper's fields."""
    raw = row.get("sim_task")
    if raw is None:
        return scene_from_row(row, task_id)
    try:
        return Scene.from_dict(json.loads(raw) if isinstance(raw, str) else raw)
    except (TypeError, ValueError, KeyError) as exc:
        raise DataError(f"is malformed ({type(exc).__name__}: {exc}); rebuild the rows with alfworld/build_dataset.py",
                        field="sim_task") from None
