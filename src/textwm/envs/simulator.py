"""The Simulator: every environment step answered by the local responder or the world model.

Env-agnostic: an env plugs in a :class:`~textwm.envs.contract.SimEpisode` (its per-episode state,
its local responder, its WM prompt, its outcome). The simulator asks the responder first (unless
disabled: the paper's ``<ENV>_WM_GUARD=0``), else the WM client, records which one answered, feeds
the observation back to the episode and returns a :class:`~textwm.envs.episode.Step` with the
episode's outcome.

A WM failure (after the client's retries) is handled by ``on_wm_error``: ``end`` (the default) fails the step
(``Step.error``, failure ``wm_error``) and so ends the episode; ``fallback`` answers with the env's substitute
observation, as the paper's plugins do (:meth:`~textwm.envs.contract.SimEpisode.fallback_observation`: ALFWorld
"Nothing happens.", ...), and the episode goes on. Either way the failure is counted (``wm_errors``), and a
substituted step is recorded as answered by ``fallback``, never as the world model's.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from textwm.clients.wm import WMClient, WMError
from textwm.envs.contract import SimEpisode
from textwm.envs.episode import Step
from textwm.generation.anchors import words_first

log = logging.getLogger(__name__)

LOCAL, WM, FALLBACK = "local", "wm", "fallback"
WM_ERROR = "wm_error"
#: What a WM failure does: end the episode, or substitute the env's fallback observation and go on.
ON_WM_ERROR = ("end", "fallback")
#: The paper-style switch of the policy for processes configured by environment (the ms-swift plugin).
ON_WM_ERROR_ENV = "WM_ON_ERROR"


@dataclass
class SimulatorStats:
    local: int = 0
    wm: int = 0
    #: Steps answered by the fallback observation after a WM failure (each also counted in ``wm_errors``).
    fallback: int = 0
    #: WM steps sent with a template of what the responder knew (each also counted in ``wm``).
    anchored: int = 0
    wm_errors: int = 0
    last_errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"local": self.local, "wm": self.wm, "fallback": self.fallback, "anchored": self.anchored,
                "wm_errors": self.wm_errors}


def flag_from_env(env_var: str, default: bool, *, meaning: str = "1 (on) or 0 (off)") -> bool:
    """An on/off switch ``$<env_var>`` (1/0, true/false, yes/no), ``default`` when unset; ValueError otherwise
    (``meaning``: what the values mean, in the message)."""
    value = os.environ.get(env_var, "").strip().lower()
    if value not in ("0", "1", "false", "true", "no", "yes", ""):
        raise ValueError(f"${env_var}={value!r}: use {meaning}")
    return default if not value else value in ("1", "true", "yes")


def guard_enabled(env_var: str) -> bool:
    """The paper's switch: ``<ENV>_WM_GUARD=0`` sends every step to the world model."""
    return flag_from_env(env_var, True, meaning="0 (all steps to the world model) or 1 (local responder on)")


def anchors_enabled(env_var: str) -> bool:
    """``$<ENV>_WM_ANCHORS`` (off by default; an env without the switch, ``env_var`` empty, never)."""
    return bool(env_var) and flag_from_env(env_var, False, meaning="1 (send the known text as a template) or 0")


def wm_prompt_from_env(env_var: str, layouts: Sequence[str]) -> str | None:
    """``$<ENV>_WM_PROMPT``, the WM prompt layout that overrides the rows' (one of ``layouts``), checked; None when
    unset."""
    value = os.environ.get(env_var, "").strip()
    if value and value not in layouts:
        raise ValueError(f"${env_var}={value!r}: use one of {', '.join(layouts)}")
    return value or None


def on_wm_error_from_env(default: str = "end") -> str:
    """``$WM_ON_ERROR`` (``end`` or ``fallback``), checked."""
    value = os.environ.get(ON_WM_ERROR_ENV, "").strip().lower() or default
    if value not in ON_WM_ERROR:
        raise ValueError(f"${ON_WM_ERROR_ENV}={value!r}: use {' or '.join(ON_WM_ERROR)}")
    return value


class Simulator:
    def __init__(self, wm: WMClient | None, *, use_local: bool = True, on_wm_error: str = "end",
                 anchors: bool = False):
        if wm is None and not use_local:
            raise ValueError("a simulator without a world model needs the local responder")
        if on_wm_error not in ON_WM_ERROR:
            raise ValueError(f"on_wm_error must be one of {', '.join(ON_WM_ERROR)}, got {on_wm_error!r}")
        self.wm = wm
        self.use_local = use_local
        self.on_wm_error = on_wm_error
        #: Ask the episode for the known part of the observation (``known_frame``) and send it as a template.
        self.anchors = anchors
        self.stats = SimulatorStats()
        self._lock = threading.Lock()  # episodes of one simulator may step in parallel threads

    def step(self, episode: SimEpisode, action: str) -> Step:
        """Answer ``action`` in ``episode`` (which records it); a WM failure is a failed step, not an observation."""
        if self.use_local:
            answer = episode.local_answer(action)
            if answer is not None:
                return self._answered(episode, action, answer, LOCAL)
        if self.wm is None:
            return self._failed(episode, "no world model configured for a step the responder cannot answer")
        q = episode.wm_query(action)
        template = episode.known_frame(action) if self.anchors else None
        # Whitespace before a slot goes to the slot, with its word (a BPE tokenizer's split: anchors.words_first).
        anchors = {} if template is None else {"response_template": words_first(template)}
        try:
            result = self.wm.predict(q.system_prompt, q.state, q.action, **anchors)
        except WMError as exc:
            error = f"{type(exc).__name__}: {exc}"
            if self.on_wm_error == "fallback":
                log.warning("world model failed on %r: %s; answered with the fallback observation", action, exc)
                self._count_error(error)
                return self._answered(episode, action, episode.fallback_observation(action), FALLBACK)
            log.warning("world model failed on %r: %s", action, exc)
            return self._failed(episode, error)
        return self._answered(episode, action, result.observation, WM, anchored=bool(anchors))

    def _answered(self, episode: SimEpisode, action: str, observation: str, source: str, *,
                  anchored: bool = False) -> Step:
        episode.observe(action, observation, source)
        with self._lock:
            setattr(self.stats, source, getattr(self.stats, source) + 1)
            self.stats.anchored += anchored
        return Step(observation, episode.outcome(), source=source, message=episode.agent_message(observation),
                    anchored=anchored)

    def _failed(self, episode: SimEpisode, error: str) -> Step:
        self._count_error(error)
        return Step(None, episode.outcome(), error=error, failure=WM_ERROR)

    def _count_error(self, error: str) -> None:
        with self._lock:
            self.stats.wm_errors += 1
            self.stats.last_errors = [*self.stats.last_errors[-9:], error]
