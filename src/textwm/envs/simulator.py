"""The Simulator: every environment step answered by the local responder or the world model.

Env-agnostic: an env plugs in an :class:`Episode` (its per-episode state, its local responder, its
WM prompt). The simulator asks the responder first (unless disabled: the paper's ``*_WM_GUARD=0``),
else the WM client, records which one answered, and feeds the observation back to the episode. A
WM failure is reported as such (:class:`SimStep.error`), never replaced by a made-up observation.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from textwm.clients.wm import WMClient, WMError

log = logging.getLogger(__name__)

LOCAL, WM = "local", "wm"


@dataclass(frozen=True)
class WMQuery:
    system_prompt: str
    state: str
    action: str


class Episode(Protocol):
    """Per-episode state of one env, plain data that can travel with a request."""

    def local_answer(self, action: str) -> str | None: ...

    def wm_query(self, action: str) -> WMQuery: ...

    def observe(self, action: str, observation: str, source: str) -> None: ...


@dataclass
class SimStep:
    observation: str | None
    source: str | None
    #: Set when the world model failed: the caller ends the episode and counts it.
    error: str | None = None


@dataclass
class SimulatorStats:
    local: int = 0
    wm: int = 0
    wm_errors: int = 0
    last_errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"local": self.local, "wm": self.wm, "wm_errors": self.wm_errors}


def guard_enabled(env_var: str) -> bool:
    """The paper's switch: ``<ENV>_WM_GUARD=0`` sends every step to the world model."""
    value = os.environ.get(env_var, "1").strip().lower()
    if value not in ("0", "1", "false", "true", "no", "yes", ""):
        raise ValueError(f"${env_var}={value!r}: use 0 (all steps to the world model) or 1 (local responder on)")
    return value not in ("0", "false", "no")


class Simulator:
    def __init__(self, wm: WMClient | None, *, use_local: bool = True):
        if wm is None and not use_local:
            raise ValueError("a simulator without a world model needs the local responder")
        self.wm = wm
        self.use_local = use_local
        self.stats = SimulatorStats()

    def step(self, episode: Episode, action: str) -> SimStep:
        if self.use_local:
            answer = episode.local_answer(action)
            if answer is not None:
                episode.observe(action, answer, LOCAL)
                self.stats.local += 1
                return SimStep(answer, LOCAL)
        if self.wm is None:
            self.stats.wm_errors += 1
            return SimStep(None, None, error="no world model configured for a step the responder cannot answer")
        q = episode.wm_query(action)
        try:
            result = self.wm.predict(q.system_prompt, q.state, q.action)
        except WMError as exc:
            self.stats.wm_errors += 1
            self.stats.last_errors = [*self.stats.last_errors[-9:], str(exc)]
            log.warning("world model failed on %r: %s", action, exc)
            return SimStep(None, None, error=f"{type(exc).__name__}: {exc}")
        episode.observe(action, result.observation, WM)
        self.stats.wm += 1
        return SimStep(result.observation, WM)
