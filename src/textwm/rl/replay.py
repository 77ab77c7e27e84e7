"""The replay reward's core: a GRPO episode's actions replayed in a real env server, and the real outcome.

The paper's ScienceWorld reward (``sciworld/sciworld_plugin.py``: ``SciWorldReward.__call__`` with
``call_real_env``) replays each episode's actions in the real env server at ``SCIWORLD_ENV_URL``: one
fresh env per completion, each action stepped in order until the env says done, and the env's score
after the last step is the episode's score. We follow that rule, with two differences:

* it is off unless the env's :attr:`~textwm.envs.contract.EnvSpec.replay_url_env` (ScienceWorld:
  ``SCIWORLD_ENV_URL``) names one of our env servers (:mod:`textwm.envs.server`,
  ``sciworld/sciworld_env_server.py``), reached with :class:`~textwm.envs.client.EnvClient`; without it
  the reward is that of the simulated trajectory, as before;
* a failure (server unreachable, a session lost, a reset or step refused) is a :class:`ReplayResult`
  with its ``error``, never a score of 0 (upstream turns every failure into ``score 0.0, done``). The
  reward counts it, logs it and records it (:mod:`textwm.rl.swift_adapters`).

The real outcome is ``Outcome(done, reason, score)``: ``done`` and ``score`` are the real env's; the
reason is the real env's end reason (:meth:`~textwm.envs.contract.EnvSpec.end_reason`) when it ended
the episode, else the trajectory's own (a loop, a streak, the turn limit: rules the replay shares).
The reward is the env spec's reward of it (:meth:`~textwm.envs.contract.EnvSpec.reward`).

Sessions are reused: each of at most ``sessions`` clients keeps one server session (one env process on
the server) and resets it for every replay, so a replay costs no env start.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from textwm.clients.retry import RetryPolicy
from textwm.envs.client import EnvClient
from textwm.envs.contract import EnvSpec, Outcome
from textwm.envs.protocol import EnvError

log = logging.getLogger(__name__)

#: Replays run at once (server sessions held), unless ``$TEXTWM_REPLAY_SESSIONS`` says otherwise.
REPLAY_SESSIONS = 4
REPLAY_SESSIONS_ENV = "TEXTWM_REPLAY_SESSIONS"
#: Seconds one request to the env server may take, retries included (a first reset starts an env).
REPLAY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ReplayResult:
    """One episode's replay: the real outcome (None when the replay failed), the actions stepped, the error."""

    outcome: Outcome | None
    steps: int
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": None if self.outcome is None else self.outcome.to_dict(), "steps": self.steps,
                "error": self.error, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class ReplayEpisode:
    """What a replay needs of an episode (from its ``rollout_infos``)."""

    task_id: str
    #: The agent's actions in order; None for an unparseable reply (skipped, as the env never saw it).
    actions: tuple[str | None, ...]
    reset_options: Mapping[str, Any]
    #: The trajectory's own end reason (None while it went on).
    trajectory_reason: str | None = None

    @classmethod
    def from_infos(cls, infos: Mapping[str, Any]) -> ReplayEpisode:
        return cls(task_id=str(infos["task_id"]), actions=tuple(infos.get("actions") or ()),
                   reset_options=dict(infos.get("reset_options") or {}), trajectory_reason=infos.get("end_reason"))


class EnvReplayer:
    """Replays episodes in the env server at ``url`` over at most ``sessions`` reused sessions (thread-safe).

    Counters (``replays``, ``errors``) cover this object's life: bounded numbers, nothing kept per request.
    """

    def __init__(self, spec: EnvSpec, url: str, *, sessions: int = REPLAY_SESSIONS,
                 timeout_s: float = REPLAY_TIMEOUT_S, retry: RetryPolicy = RetryPolicy(), api_key: str | None = None):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{spec.replay_url_env or 'the replay URL'}={url!r}: give the env server's URL, e.g. "
                             "http://127.0.0.1:30003")
        if sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {sessions}")
        self.spec, self.url, self.sessions = spec, url.rstrip("/"), sessions
        self._client_args = {"timeout_s": timeout_s, "retry": retry, "api_key": api_key}
        self._idle: queue.SimpleQueue[EnvClient] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.replays = 0
        self.errors = 0

    def replay(self, episode: ReplayEpisode) -> ReplayResult:
        """Reset ``episode.task_id``, step its actions until the env ends it; the real outcome, or the error."""
        started = time.perf_counter()
        client = self._take()
        steps, ok = 0, False
        try:
            client.reset(episode.task_id, **dict(episode.reset_options))
            score, previous, done = 0.0, 0.0, False
            for action in episode.actions:
                if action is None:
                    continue
                result = client.step(action)
                steps += 1
                previous, score, done = score, float(result.score), bool(result.done)
                if done:
                    break
            outcome = (self.spec.end_outcome(score, previous) if done
                       else Outcome(False, episode.trajectory_reason, score))
            ok = True
            return ReplayResult(outcome, steps, seconds=time.perf_counter() - started)
        except EnvError as exc:
            return ReplayResult(None, steps, error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started)
        finally:
            self._count(ok)
            self._give_back(client, ok)

    def replay_all(self, episodes: Sequence[ReplayEpisode]) -> list[ReplayResult]:
        """Every episode's replay, ``sessions`` at once, in order."""
        if not episodes:
            return []
        with ThreadPoolExecutor(max_workers=min(self.sessions, len(episodes)), thread_name_prefix="replay") as pool:
            return list(pool.map(self.replay, episodes))

    def close(self) -> None:
        """End every idle session on the server."""
        while True:
            try:
                client = self._idle.get_nowait()
            except queue.Empty:
                return
            self._close(client)

    def _take(self) -> EnvClient:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return EnvClient(self.url, **self._client_args)

    def _give_back(self, client: EnvClient, ok: bool) -> None:
        """Keep a healthy client's session for the next replay (at most ``sessions``); end a failed one's."""
        if ok and self._idle.qsize() < self.sessions:
            self._idle.put(client)
        else:
            self._close(client)

    def _close(self, client: EnvClient) -> None:
        try:
            client.close()
        except EnvError as exc:  # the server is gone: its session with it
            log.debug("closing a replay session at %s failed: %s", self.url, exc)

    def _count(self, ok: bool) -> None:
        with self._lock:
            self.replays += 1
            self.errors += int(not ok)


def replayer_from_env(spec: EnvSpec, environ: Mapping[str, str] | None = None) -> EnvReplayer | None:
    """The replayer the env's switch (``$<spec.replay_url_env>``, e.g. ``SCIWORLD_ENV_URL``) selects; None: off.
    ``$TEXTWM_REPLAY_SESSIONS``: replays at once (keep it within the server's capacity)."""
    environ = os.environ if environ is None else environ
    if not spec.replay_url_env:
        return None
    url = environ.get(spec.replay_url_env, "").strip()
    if not url:
        return None
    raw = environ.get(REPLAY_SESSIONS_ENV, "").strip() or str(REPLAY_SESSIONS)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"${REPLAY_SESSIONS_ENV}={raw!r}: give the number of replays at once (>= 1)")
    return EnvReplayer(spec, url, sessions=int(raw))
