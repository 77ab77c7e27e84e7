"""The trajectory log of GRPO rollouts: one JSON line per finished episode, and one per rewarded batch beside it.

Several trainer ranks may append to one file: every line is written whole under an exclusive lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Env var naming the trajectory log file (default: ``<output_dir>/trajectories.jsonl``).
TRAJECTORY_LOG_ENV = "TEXTWM_TRAJECTORY_LOG"
#: The paper's name of the same switch (its alfworld/appworld plugins and run scripts read ``TRAJECTORY_LOG``).
PAPER_TRAJECTORY_LOG_ENV = "TRAJECTORY_LOG"
TRAJECTORY_LOG_NAME = "trajectories.jsonl"
#: Where the log goes when neither the env var nor the trainer's output_dir is known.
FALLBACK_TRAJECTORY_LOG = Path("runs") / TRAJECTORY_LOG_NAME


def trajectory_log_path(args: Any = None, environ: Mapping[str, str] | None = None) -> Path:
    """``$TEXTWM_TRAJECTORY_LOG`` (or the paper's ``$TRAJECTORY_LOG``),
    else ``<trainer output_dir>/trajectories.jsonl``, else ``runs/trajectories.jsonl``."""
    environ = os.environ if environ is None else environ
    for name in (TRAJECTORY_LOG_ENV, PAPER_TRAJECTORY_LOG_ENV):
        if environ.get(name, "").strip():
            return Path(environ[name].strip())
    output_dir = getattr(args, "output_dir", None)
    if output_dir:
        return Path(output_dir) / TRAJECTORY_LOG_NAME
    return FALLBACK_TRAJECTORY_LOG


class TrajectoryLog:
    """Append-only JSONL; every line is written whole under an exclusive lock, so ranks can share a file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def append(self, records: Iterable[Mapping[str, Any]]) -> None:
        lines = [(json.dumps(r, ensure_ascii=False) + "\n").encode() for r in records]
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            for line in lines:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)  # releases the lock


#: One line per rewarded batch (every generation round, dynamic sampling's resamples included), beside the
#: trajectory log: how many GRPO groups had no reward spread, hence no gradient.
BATCH_LOG_NAME = "reward_batches.jsonl"


def batch_record(step: Any, records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A rewarded batch: episodes, groups (by ``prompt_id``), groups whose rewards are all equal, mean reward, and
    the seconds spent answering the agent (per turn; per world-model step)."""
    groups: dict[Any, list[float]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.get("prompt_id") or f"#{i}", []).append(r["reward"])     # no id: its own group
    flat = sum(1 for rewards in groups.values() if len(rewards) > 1 and max(rewards) == min(rewards))
    rewards = [r["reward"] for r in records]
    timing = [r.get("timing") or {} for r in records]
    turns = sum(int(r.get("turns") or 0) for r in records)
    wm_steps = sum(t.get("wm_steps", 0) for t in timing)
    return {"time": round(time.time(), 3), "step": step, "episodes": len(records), "groups": len(groups),
            "zero_spread_groups": flat, "mean_reward": round(sum(rewards) / max(1, len(rewards)), 4),
            "successes": sum((r.get("outcome") or {}).get("reason") == "success" for r in records),
            # Seconds per turn spent answering (env or simulator), and per world-model step (its call included).
            "answer_s_per_turn": round(sum(t.get("answer_seconds", 0.0) for t in timing) / max(1, turns), 4),
            "wm_steps": wm_steps,
            "wm_s_per_step": round(sum(t.get("wm_seconds", 0.0) for t in timing) / max(1, wm_steps), 4)}
