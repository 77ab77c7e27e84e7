"""Agent RL inside the world model: generic ms-swift adapters over any env.

:mod:`textwm.rl.swift_adapters` turns an :class:`~textwm.rl.swift_adapters.EnvAdapter` (what an
env supplies: start an episode from a dataset row, parse a reply, outcome and reward, serialise)
into an ms-swift multi-turn scheduler and an ORM reward. ms-swift itself is imported only when a
class is built, so this package imports without the ``[rl]`` extra.
"""

from textwm.rl.swift_adapters import (
    STATE_KEY,
    TRAJECTORY_LOG_ENV,
    EnvAdapter,
    EpisodeDriver,
    RolloutCounters,
    TrajectoryLog,
    WMSettings,
    make_reward_class,
    make_scheduler_class,
    register,
    trajectory_log_path,
)

__all__ = [
    "STATE_KEY",
    "TRAJECTORY_LOG_ENV",
    "EnvAdapter",
    "EpisodeDriver",
    "RolloutCounters",
    "TrajectoryLog",
    "WMSettings",
    "make_reward_class",
    "make_scheduler_class",
    "register",
    "trajectory_log_path",
]
