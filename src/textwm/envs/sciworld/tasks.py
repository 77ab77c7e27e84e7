"""ScienceWorld tasks as the simulator and the datasets see them: the start state baked from the real env.

:func:`bake_task` loads the task twice and each time visits every room (teleporting; it costs
ticks, but the episode is reset afterwards) to record its look-around text. ScienceWorld lists the
objects of some rooms in a different order on every load (and re-rolls some contents, e.g. the
Mendelian-genetics plants), so only rooms whose text is identical in both loads are marked
*stable*: the responder answers looks from the map only there. A final load starts the episode the
caller plays, from time 0, and its own start observation and inventory are recorded.
"""

from __future__ import annotations

from textwm.envs.sciworld.env import SciWorldEnv
from textwm.envs.sciworld.tracker import Task
from textwm.envs.sciworld.world import ROOMS


def _tour(env: SciWorldEnv, task_id: str, simplification: str | None) -> dict[str, str]:
    env.reset(task_id, simplification=simplification)
    room_map = {}
    for room in ROOMS:
        env.step(f"teleport to {room}")
        room_map[room] = env.step("look around").observation
    return room_map


def bake_task(env: SciWorldEnv, task_id: str, *, simplification: str | None = None, gold_path: bool = False) -> Task:
    """A :class:`Task` for ``task_id``; ``env`` is left reset at time 0 of that task."""
    first, second = _tour(env, task_id, simplification), _tour(env, task_id, simplification)
    start = env.reset(task_id, simplification=simplification, gold_path=gold_path)
    inventory = env.step("inventory").observation  # free: no tick (the reset info's copy differs in whitespace)
    return Task(task_id=task_id, task_description=start.task_description, initial_observation=start.observation,
                initial_inventory=inventory, room_map=first, simplification=start.info["simplification"],
                stable_rooms=sorted(room for room in ROOMS if first[room] == second[room]))
