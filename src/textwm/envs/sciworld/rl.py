"""ScienceWorld for GRPO inside the world model: the env adapter behind ``sciworld/sciworld_plugin.py``.

The generic ms-swift scheduler and reward (:mod:`textwm.rl.swift_adapters`) drive it:

- an episode starts from an RL row's ``sim_task`` (start state + gold-run goals, written by
  ``sciworld/build_wm_dataset.py``) as a :class:`~textwm.envs.sciworld.sim.SciWorldEpisode`;
- replies are parsed by :func:`~textwm.envs.sciworld.agent.parse_action`;
- steps are answered by the local responder, else the world model at ``$WM_ENDPOINT``
  (``SCIWORLD_WM_GUARD=0``: every step goes to the world model);
- outcome and reward come from the trajectory (:mod:`textwm.envs.sciworld.reward`): score / 100
  in [-1, 1], -1 for a wrong focus, -0.1 for an episode ended by a loop or a streak.

The paper's released RL rows (``sciworld_rl_split.jsonl``) have no ``sim_task``: they carry a
prompt for the world model, but neither a start state the tracker can follow nor the goals a score
needs. Every episode would then get the same reward and GRPO would learn nothing, silently, so such
a row is refused with an error that names it and the command that rebuilds rows from the real env.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from textwm.envs.sciworld.agent import parse_action, task_from_row
from textwm.envs.sciworld.reward import Outcome, reward
from textwm.envs.sciworld.sim import GUARD_ENV, SciWorldEpisode

#: Told to the agent after a reply without an action.
INVALID_REPLY_HINT = ("Your reply contained no action. Reply with exactly one ScienceWorld action as plain text on "
                      "one line, for example: look around, teleport to kitchen, pick up thermometer, activate stove.")


def _clean_sim_task(sim: Any) -> Any:
    """Undo what a columnar dataset loader does to ``sim_task``: rows of other tasks add null rooms/keys."""
    if isinstance(sim, str):
        sim = json.loads(sim)
    if not isinstance(sim, Mapping):
        return sim
    sim = {k: v for k, v in sim.items() if v is not None}
    if isinstance(sim.get("room_map"), Mapping):
        sim["room_map"] = {room: text for room, text in sim["room_map"].items() if text is not None}
    return sim


class SciWorldAdapter:
    """:class:`textwm.rl.swift_adapters.EnvAdapter` for ScienceWorld."""

    name = "sciworld"
    guard_env = GUARD_ENV

    def start(self, row: Mapping[str, Any]) -> SciWorldEpisode:
        task_id = row.get("task_id", "?")
        if row.get("sim_task") is None:
            task = str(task_id).rsplit("_v", 1)[0]
            raise ValueError(
                f"RL row {task_id!r} has no 'sim_task' (the start state and goals the simulator scores with); "
                "rows of the paper's release have none. Rebuild the rows from the real env, e.g. "
                f"`python sciworld/build_wm_dataset.py --out-dir runs/sciworld_data --tasks {task}`, "
                "and train on runs/sciworld_data/rl_train.jsonl")
        try:
            task_obj = task_from_row({"sim_task": _clean_sim_task(row["sim_task"])})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"RL row {task_id!r}: unreadable 'sim_task' ({exc}); rebuild it with "
                             "sciworld/build_wm_dataset.py") from exc
        return SciWorldEpisode.start(task_obj)

    def parse_action(self, reply: str) -> str | None:
        return parse_action(reply)

    def invalid_reply_hint(self) -> str:
        return INVALID_REPLY_HINT

    def mark_unparseable(self, episode: SciWorldEpisode) -> None:
        episode.unparseable()

    def outcome(self, episode: SciWorldEpisode) -> dict[str, Any]:
        o = episode.outcome()
        return {"done": o.done, "reason": o.reason, "score": o.score}

    def reward(self, outcome: Mapping[str, Any]) -> float:
        return reward(Outcome(bool(outcome["done"]), outcome.get("reason"), float(outcome["score"])))

    def to_dict(self, episode: SciWorldEpisode) -> dict[str, Any]:
        return episode.to_dict()

    def from_dict(self, data: Mapping[str, Any]) -> SciWorldEpisode:
        return SciWorldEpisode.from_dict(dict(data))
