"""The environment protocol every real env, server client and simulator speaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ResetResult:
    observation: str
    task_description: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    observation: str
    #: Change of score caused by this step.
    reward: float
    #: Task score after this step (ScienceWorld: -100 or 0..100).
    score: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(Protocol):
    """A text environment playing one task at a time."""

    def reset(self, task_id: str) -> ResetResult: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class EnvError(RuntimeError):
    """The environment failed (process died, session unknown or expired, bad task id)."""
