"""ScienceWorld tasks as the simulator and the datasets see them: the start state baked from the real env.

:func:`bake_task` loads the task twice and each time visits every room (teleporting; it costs
ticks, but the episode is reset afterwards) to record its look-around text. ScienceWorld lists the
objects of some rooms in a different order on every load (and re-rolls some contents, e.g. the
Mendelian-genetics plants), so only rooms whose text is identical in both loads are marked
*stable*: the responder answers looks from the map only there. A final load starts the episode the
caller plays, from time 0, and its own start observation and inventory are recorded.

:func:`bake_sim_task` adds what only the gold run knows (its scoring goals,
:func:`~textwm.envs.sciworld.reward.goals_from_gold`): the whole ``sim_task`` of an RL row, the one the
dataset builder writes and the one :mod:`textwm.envs.sim_cache` builds for rows that lack it (the paper's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib.metadata import version

from textwm.envs.protocol import StepResult
from textwm.envs.sciworld.env import SciWorldEnv
from textwm.envs.sciworld.reward import goals_from_gold
from textwm.envs.sciworld.tracker import Task
from textwm.envs.sciworld.world import ROOMS

#: Version of the bake below: raise it when a change alters baked tasks, so cached ones are rebuilt.
BAKE_VERSION = 3   # 2: arrivals the gold run was credited for are milestones; 3: room_objects, "through the door"
#: ``on_step(i, action, (room contents, inventory) before the action, result)`` of :func:`play_gold`.
GoldStep = Callable[[int, str, tuple[str, str], StepResult], None]


def _tour(env: SciWorldEnv, task_id: str, simplification: str | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Every room's look-around text and the names of the objects in reach there."""
    env.reset(task_id, simplification=simplification)
    room_map, objects = {}, {}
    for room in ROOMS:
        env.step(f"teleport to {room}")
        room_map[room] = env.step("look around").observation
        objects[room] = env.object_names()
    return room_map, objects


def bake_task(env: SciWorldEnv, task_id: str, *, simplification: str | None = None, gold_path: bool = False) -> Task:
    """A :class:`Task` for ``task_id``; ``env`` is left reset at time 0 of that task."""
    (first, objects), (second, objects2) = _tour(env, task_id, simplification), _tour(env, task_id, simplification)
    start = env.reset(task_id, simplification=simplification, gold_path=gold_path)
    inventory = env.step("inventory").observation  # free: no tick (the reset info's copy differs in whitespace)
    return Task(task_id=task_id, task_description=start.task_description, initial_observation=start.observation,
                initial_inventory=inventory, room_map=first, simplification=start.info["simplification"],
                stable_rooms=sorted(room for room in ROOMS if first[room] == second[room]),
                room_objects={room: sorted({*objects[room], *objects2[room]}) for room in ROOMS})


def play_gold(env: SciWorldEnv, on_step: GoldStep | None = None) -> list[tuple[str, str, float]]:
    """Play the gold actions of the task ``env`` was reset to (``gold_path=True``) until the env ends it; returns
    ``(action, observation, score after)`` per step. ``on_step`` also sees the real state before each action (the
    look-around and inventory cost no tick, but time: they are read only for it)."""
    steps = []
    for i, action in enumerate(env.gold_actions()):
        state = (env.look(), env.inventory()) if on_step is not None else ("", "")
        result = env.step(action)
        if on_step is not None:
            on_step(i, action, state, result)
        steps.append((action, result.observation, result.score))
        if result.done:
            break
    return steps


def bake_sim_task(env: SciWorldEnv, task_id: str, *, simplification: str | None = None,
                  prompt_style: str = "full") -> Task:
    """The full simulator start state of ``task_id``: :func:`bake_task` plus the gold run's goals."""
    task = dataclasses.replace(bake_task(env, task_id, simplification=simplification, gold_path=True),
                               prompt_style=prompt_style)
    return dataclasses.replace(task, goals=goals_from_gold(play_gold(env)).to_dict())


def sim_task_version() -> str:
    """What a baked task depends on: the ScienceWorld package and :data:`BAKE_VERSION`."""
    return f"scienceworld={version('scienceworld')};bake={BAKE_VERSION}"
