"""ScienceWorld tasks as the simulator and the datasets see them: the start state baked from the real env.

:func:`bake_task` resets the real env, records the start observation and inventory, visits every
room (teleporting; it costs ticks but the episode is reset afterwards) to record its look-around
text, and resets again, so the caller plays the task from time 0.
"""

from __future__ import annotations

from textwm.envs.sciworld.env import SciWorldEnv
from textwm.envs.sciworld.tracker import Task
from textwm.envs.sciworld.world import ROOMS


def bake_task(env: SciWorldEnv, task_id: str, *, simplification: str | None = None, gold_path: bool = False) -> Task:
    """A :class:`Task` for ``task_id``; ``env`` is left reset at time 0 of that task."""
    start = env.reset(task_id, simplification=simplification)
    inventory = env.step("inventory").observation  # the step text (the reset info's copy differs in whitespace)
    room_map = {}
    for room in ROOMS:
        env.step(f"teleport to {room}")
        room_map[room] = env.step("look around").observation
    env.reset(task_id, simplification=simplification, gold_path=gold_path)
    return Task(task_id=task_id, task_description=start.task_description, initial_observation=start.observation,
                initial_inventory=inventory, room_map=room_map, simplification=start.info["simplification"])
