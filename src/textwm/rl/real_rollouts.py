"""GRPO rollouts in the real env: the scheduler, reward and agent prompt of the world-model path, with every
action stepped in a real env server session instead of the simulator.

This is the upper reference of Stage 2 (what GRPO gets from the true environment) and the check of the whole
path (rows, scheduler, reward, advantages, optimiser): if an agent does not improve here, nothing is wrong with
the world model. Selected per run (``TEXTWM_ROLLOUT_ENV=real`` with ``TEXTWM_REAL_ENV_URL`` naming an env server,
``python <env>/<env>_env_server.py``; the launcher's ``--rollout-env real --real-env-url URL``).

Each live episode holds one server session, opened and reset to its task when the episode starts (the agent's
first message is rebuilt from the real reset where the env says so, :meth:`EnvSpec.real_start`) and given back
when the episode ends (kept for the next episode's reset); at most ``max_sessions`` are held. A session lost
mid-episode fails the episode; it is never reset behind the agent's back. The episode's own
simulated state still records every step, so the trajectory's rules that are not the task's (loops, streaks,
the turn limit) end a real episode exactly as a simulated one; score, success and the env's own end (a wrong
focus, its step limit) are the real env's. A failed request ends the episode as ``env_error`` (counted and
logged), never with a made-up observation.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from textwm.clients.retry import RetryPolicy
from textwm.envs.client import EnvClient
from textwm.envs.contract import EnvSpec, Outcome, SimEpisode
from textwm.envs.episode import Step
from textwm.envs.protocol import EnvError, ResetResult

log = logging.getLogger(__name__)

#: ``wm`` (default: the simulator) or ``real``.
ROLLOUT_ENV_VAR = "TEXTWM_ROLLOUT_ENV"
ROLLOUT_ENVS = ("wm", "real")
#: The env server of real rollouts.
REAL_ENV_URL_VAR = "TEXTWM_REAL_ENV_URL"
#: Episodes in flight at most (sessions held on the server), unless ``$TEXTWM_REAL_SESSIONS`` says otherwise.
REAL_SESSIONS_VAR = "TEXTWM_REAL_SESSIONS"
REAL_SESSIONS = 64
#: Who answered a real step, in the trajectory's ``sources``.
REAL = "real"
#: End reasons the real env decides; the others are the trajectory's own rules.
TASK_REASONS = frozenset({"success", "wrong_focus", "env_done"})


class RealEnvRollouts:
    """Steps episodes (by key) in the env server at ``url``; thread-safe; at most ``max_sessions`` sessions held,
    live and idle together."""

    def __init__(self, spec: EnvSpec, url: str, *, max_sessions: int = REAL_SESSIONS, timeout_s: float = 120.0,
                 retry: RetryPolicy = RetryPolicy(), api_key: str | None = None):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{REAL_ENV_URL_VAR}={url!r}: give the env server's URL, e.g. http://127.0.0.1:30003")
        if max_sessions < 1:
            raise ValueError(f"{REAL_SESSIONS_VAR}={max_sessions}: use 1 or more")
        self.spec, self.url, self.max_sessions = spec, url.rstrip("/"), max_sessions
        self._client_args = {"timeout_s": timeout_s, "retry": retry, "api_key": api_key}
        self._live: dict[str, EnvClient | None] = {}             # episode key -> its session (None: resetting)
        self._idle: queue.SimpleQueue[EnvClient] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.steps = self.errors = 0

    def start(self, key: str, task_id: str, reset_options: Mapping[str, Any]) -> ResetResult:
        """Open (or reuse) a session for the episode ``key`` and reset it to ``task_id``. Raises EnvError: the
        server failed, or as many episodes as ``max_sessions`` are in flight already."""
        with self._lock:
            if key in self._live:
                raise EnvError(f"episode {key} started twice")
            if len(self._live) >= self.max_sessions:
                raise EnvError(f"{len(self._live)} real-env episodes in flight, the most {REAL_SESSIONS_VAR} allows; "
                               "raise it to the episodes a generation round plays on this process")
            self._live[key] = None                            # reserved while the reset runs
        try:
            client = self._idle.get_nowait()
        except queue.Empty:
            client = EnvClient(self.url, **self._client_args)
        try:
            reset = client.reset(task_id, **dict(reset_options))
        except EnvError:
            with self._lock:
                self._live.pop(key, None)
            self._close(client)
            self._count(error=True)
            raise
        with self._lock:
            self._live[key] = client
        return reset

    def step(self, key: str, episode: SimEpisode, action: str, *, previous_score: float = 0.0) -> Step:
        """``action`` in the episode ``key``'s session (:meth:`start` first); ``previous_score``: the real score
        before it (what a wrong focus keeps, :meth:`EnvSpec.end_outcome`). A lost session is a failed step: the
        episode is never reset behind the agent's back."""
        with self._lock:
            client = self._live.get(key)
        try:
            if client is None:
                raise EnvError(f"episode {key} has no session (never started, or its session was lost)")
            result = client.step(action)
        except EnvError as exc:
            self._count(error=True)
            self.end(key, healthy=False)
            log.warning("%s real rollout: action %r: %s", self.spec.name, action, exc)
            return Step(None, Outcome(False, None, previous_score), error=f"{type(exc).__name__}: {exc}",
                        failure="env_error")
        self._count(error=False)
        episode.observe(action, result.observation, REAL)
        score = float(result.score)
        outcome = (shaped(self.spec.end_outcome(score, previous_score), episode.outcome()) if result.done
                   else ongoing(episode, score))
        return Step(result.observation, outcome, source=REAL,
                    message=self.spec.agent_message(result.observation, result.info), info=dict(result.info))

    def end(self, key: str, *, healthy: bool = True) -> None:
        """The episode is over: its session is kept for another episode (or closed when it failed)."""
        with self._lock:
            client = self._live.pop(key, None)
            keep = healthy and client is not None and self._idle.qsize() + len(self._live) < self.max_sessions
        if client is None:
            return
        if keep:
            self._idle.put(client)
        else:
            self._close(client)

    def close(self) -> None:
        with self._lock:
            clients = [c for c in self._live.values() if c is not None]
            self._live.clear()
        while not self._idle.empty():
            clients.append(self._idle.get_nowait())
        for client in clients:
            self._close(client)

    def stats(self) -> dict[str, int]:
        return {"steps": self.steps, "errors": self.errors, "live": len(self._live), "idle": self._idle.qsize()}

    def _close(self, client: EnvClient) -> None:
        try:
            client.close()
        except EnvError as exc:  # the server is gone, and its session with it
            log.debug("closing a real-rollout session at %s failed: %s", self.url, exc)

    def _count(self, *, error: bool) -> None:
        with self._lock:
            self.steps += 1
            self.errors += int(error)


def shaped(real: Outcome, own: Outcome) -> Outcome:
    """The real outcome with the reward the env shapes from the trajectory (ALFWorld's partial credit and
    penalties, read from the real observations), where the real env gives none and both agree on success."""
    if real.reward is None and own.reward is not None and (real.reason == "success") == (own.reason == "success"):
        return replace(real, reward=own.reward)
    return real


def ongoing(episode: SimEpisode, score: float) -> Outcome:
    """A real episode the env has not ended, at ``score`` (after a step or an unparseable reply): over only when
    the trajectory's own rules (a loop, a streak of rejected or unparseable replies) end it, as they would end a
    simulated one; with the env's shaped reward of the trajectory (:func:`shaped`)."""
    own = episode.outcome()
    done = own.done and own.reason not in TASK_REASONS
    return shaped(Outcome(done, own.reason if done else None, score), own)


def rollout_env(environ: Mapping[str, str] | None = None) -> str:
    """``wm`` or ``real`` from ``$TEXTWM_ROLLOUT_ENV`` (default ``wm``)."""
    environ = os.environ if environ is None else environ
    value = environ.get(ROLLOUT_ENV_VAR, "").strip().lower() or "wm"
    if value not in ROLLOUT_ENVS:
        raise ValueError(f"${ROLLOUT_ENV_VAR}={value!r}: use {' or '.join(ROLLOUT_ENVS)}")
    return value


def real_rollouts_from_env(spec: EnvSpec, environ: Mapping[str, str] | None = None) -> RealEnvRollouts | None:
    """The real-env backend ``$TEXTWM_ROLLOUT_ENV=real`` selects (None: rollouts in the world model)."""
    environ = os.environ if environ is None else environ
    if rollout_env(environ) != "real":
        return None
    url = environ.get(REAL_ENV_URL_VAR, "").strip()
    if not url:
        raise ValueError(f"${ROLLOUT_ENV_VAR}=real needs ${REAL_ENV_URL_VAR}: the env server's URL (start one with "
                         f"python {spec.name}/{spec.name}_env_server.py --port 30003)")
    raw = environ.get(REAL_SESSIONS_VAR, "").strip() or str(REAL_SESSIONS)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"${REAL_SESSIONS_VAR}={raw!r}: give the most episodes in flight (>= 1)")
    backend = RealEnvRollouts(spec, url, max_sessions=int(raw))
    atexit.register(backend.close)       # the trainer's exit ends the sessions it still holds on the server
    return backend
