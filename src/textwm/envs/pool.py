"""A bounded pool of env worker processes: session routing, deadlines, idle expiry and crash recovery.

Used by the env server (:mod:`textwm.envs.server`) and by parallel evaluation
(:class:`~textwm.envs.blocking.BlockingPool`). Each worker is a ``multiprocessing`` process (spawn
context, :func:`~textwm.envs.worker.worker_main`) that owns up to ``max_sessions_per_worker``
sessions of one env (:meth:`~textwm.envs.contract.EnvSpec.open_session`) and answers one request at
a time over its own pipe. The parent (one event loop) routes a session to its worker and holds one
FIFO :class:`asyncio.Lock` per worker, so requests to a busy worker are served in arrival order while
sessions on different workers step concurrently; the blocking pipe round trips run in a thread pool
so the event loop never blocks.

Failure handling, all visible to the caller (the errors of :mod:`textwm.envs.protocol`):

- an idle session (no request for ``idle_timeout_s``) is closed; asking for it again raises
  :class:`SessionExpired`;
- a worker that dies (or does not answer within ``request_timeout_s`` and is killed) is replaced;
  its sessions raise :class:`SessionLost` naming the crash, at once, instead of hanging;
- an env that fails under one session loses that session only (:class:`SessionLost`).

Workers put themselves in their own process group so that a Ctrl-C at the terminal reaches only the
parent, which then shuts them down in order; a worker whose parent died sees its pipe close and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import time
import uuid
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from textwm.config import option
from textwm.envs.contract import EnvSpec
from textwm.envs.protocol import (
    ERROR_KINDS,
    BadRequest,
    EnvError,
    NoCapacity,
    SessionExpired,
    SessionLost,
    UnknownSession,
    WorkerFailure,
)
from textwm.envs.worker import worker_main

log = logging.getLogger(__name__)

#: Ended sessions remembered (to answer "expired" / "lost" rather than "unknown"); oldest forgotten first.
MAX_TOMBSTONES = 10_000
#: Seconds between two liveness checks while waiting for a worker's answer.
POLL_S = 0.2
#: Seconds between two attempts to start a replacement for a worker that failed to start.
RESTART_BACKOFF_S = 5.0


@dataclass(frozen=True)
class PoolConfig:
    """Size and limits of the worker pool (the env server's ``--workers`` ... flags)."""

    workers: int = option(2, "worker processes; sessions on different workers step in parallel")
    max_sessions_per_worker: int = option(8, "sessions one worker hosts at most; workers x this = capacity, more "
                                             "resets get 503")
    idle_timeout_s: float = option(600.0, "seconds without a request before a session is closed",
                                   flag="--idle-timeout")
    request_timeout_s: float = option(120.0, "seconds a worker may take for one request before it is killed and "
                                             "replaced", flag="--request-timeout")
    start_timeout_s: float = option(180.0, "seconds a new worker may take to start", flag="--start-timeout")
    #: Logging level inside the workers (set by the server from its --log-level).
    log_level: int = field(default=logging.INFO, metadata={"internal": True})

    def __post_init__(self) -> None:
        for name in ("workers", "max_sessions_per_worker"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("idle_timeout_s", "request_timeout_s", "start_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")

    @property
    def capacity(self) -> int:
        return self.workers * self.max_sessions_per_worker

    @property
    def sweep_interval_s(self) -> float:
        """How often idle sessions and dead workers are looked for."""
        return min(5.0, max(0.05, self.idle_timeout_s / 4))


# --- the parent side --------------------------------------------------------------------------


class _WorkerDied(Exception):
    pass


@dataclass
class _Handle:
    """Parent-side view of one worker process."""

    index: int
    process: Any
    conn: Connection
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    state: str = "starting"  # starting | ready | dead
    pid: int | None = None
    sessions: set[str] = field(default_factory=set)
    #: Slots promised to resets in flight.
    reserved: int = 0
    died: str = ""

    @property
    def load(self) -> int:
        return len(self.sessions) + self.reserved

    def describe(self) -> str:
        return f"worker {self.index} (pid {self.pid})"


@dataclass
class _Session:
    id: str
    handle: _Handle
    task_id: str
    last_used: float
    #: Requests in flight; a busy session never expires.
    busy: int = 0


def _exit_reason(process: Any) -> str:
    """``killed by SIGKILL`` / ``exit code 1`` / ``still running``."""
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _roundtrip(handle: _Handle, message: tuple, timeout_s: float) -> tuple:
    """Send one request and wait for its answer, checking that the worker is still alive (thread)."""
    try:
        handle.conn.send(message)
        deadline = time.monotonic() + timeout_s
        while not handle.conn.poll(POLL_S):
            if not handle.process.is_alive():
                raise _WorkerDied(f"{handle.describe()} died ({_exit_reason(handle.process)})")
            if time.monotonic() > deadline:
                handle.process.kill()
                raise _WorkerDied(f"{handle.describe()} did not answer {message[0]} within {timeout_s:g} s "
                                  "and was killed")
        return handle.conn.recv()
    except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
        handle.process.join(1.0)
        log.debug("pipe to %s broke: %s: %s", handle.describe(), type(exc).__name__, exc)
        raise _WorkerDied(f"{handle.describe()} died ({_exit_reason(handle.process)})") from None


def _log_sweeper_end(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the session sweeper stopped: idle sessions no longer expire and dead workers are not "
                  "replaced", exc_info=task.exception())


class WorkerPool:
    """Routes sessions of env ``spec`` to worker processes; all methods run on one event loop.

    Args:
        spec: the env (pickled into every worker).
        config: size and limits.
        session_config: the env's session options (an instance of ``spec.session_config``), passed to
            every ``spec.open_session``.
    """

    def __init__(self, spec: EnvSpec, config: PoolConfig, session_config: Any = None):
        self.spec = spec
        self.config = config
        self.session_config = session_config
        #: Totals since start (``GET /metrics``): resets, steps, sessions opened / closed / expired / lost, errors.
        self.counts: Counter[str] = Counter()
        self._ready_changed = asyncio.Event()
        self._ctx = multiprocessing.get_context("spawn")
        self._handles: list[_Handle] = []
        self._sessions: dict[str, _Session] = {}
        #: Ended sessions: id -> (error type, message); a fresh exception is raised per request.
        self._tombstones: OrderedDict[str, tuple[type[EnvError], str]] = OrderedDict()
        self._executor = ThreadPoolExecutor(max_workers=2 * config.workers + 2, thread_name_prefix=f"{spec.name}-pool")
        self._sweeper: asyncio.Task | None = None
        self._replacing: dict[int, asyncio.Task] = {}
        self._last_restart: dict[int, float] = {}
        self._stopping = False
        self._stopped = False
        self.restarts = 0

    # lifecycle

    def launch(self) -> None:
        """Start the worker processes without waiting for them (they prepare while the caller works)."""
        if not self._handles:
            self._handles = [self._spawn(i) for i in range(self.config.workers)]

    async def start(self) -> None:
        """Start every worker (if not launched yet) and wait until all are ready (RuntimeError if one fails)."""
        self.launch()
        results = await asyncio.gather(*(self._wait_ready(h) for h in self._handles), return_exceptions=True)
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        if failures:
            await self.stop()
            raise RuntimeError(f"{self.spec.title or self.spec.name} workers failed to start: " + "; ".join(failures))
        self._sweeper = asyncio.create_task(self._sweep_forever(), name=f"{self.spec.name}-pool-sweeper")
        self._sweeper.add_done_callback(_log_sweeper_end)
        log.info("%d worker(s) ready, up to %d sessions each (capacity %d), idle timeout %g s",
                 self.config.workers, self.config.max_sessions_per_worker, self.config.capacity,
                 self.config.idle_timeout_s)

    async def stop(self) -> None:
        """Close every session and stop every worker (killing those that do not stop). A second call does nothing
        (a failed :meth:`start` has stopped the pool already; its caller's clean-up must not bury that error)."""
        if self._stopped:
            return
        self._stopping = True
        for task in [self._sweeper, *self._replacing.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        open_sessions = len(self._sessions)
        await asyncio.gather(*(self._shutdown(h) for h in self._handles))
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._stopped = True
        self._sessions.clear()
        log.info("stopped %d worker(s), closing %d open session(s)", len(self._handles), open_sessions)

    def _spawn(self, index: int) -> _Handle:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=worker_main, name=f"{self.spec.name}-worker-{index}", daemon=True,
                                    args=(child, index, self.spec, self.session_config, self.config.log_level))
        process.start()
        child.close()
        return _Handle(index=index, process=process, conn=parent, pid=process.pid)

    async def _wait_ready(self, handle: _Handle) -> None:
        def wait() -> tuple:
            if not handle.conn.poll(self.config.start_timeout_s):
                handle.process.kill()
                raise RuntimeError(f"{handle.describe()} not ready after {self.config.start_timeout_s:g} s")
            try:
                return handle.conn.recv()
            except EOFError:
                handle.process.join(1.0)
                raise RuntimeError(f"{handle.describe()} exited during start-up ({_exit_reason(handle.process)}); "
                                   "see its log lines above") from None

        message = await asyncio.get_running_loop().run_in_executor(self._executor, wait)
        if message[0] != "ready":
            handle.process.join(5.0)
            raise RuntimeError(f"{handle.describe()} failed to prepare: {message[1]}")
        handle.pid, handle.state = message[1]["pid"], "ready"
        self._ready_changed.set()

    async def _shutdown(self, handle: _Handle) -> None:
        if handle.state == "ready" and handle.process.is_alive():
            try:
                async with handle.lock:
                    await self._call(handle, "shutdown", {}, timeout_s=30.0)
            except EnvError as exc:
                log.warning("%s did not shut down cleanly: %s", handle.describe(), exc)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._reap, handle)
        handle.state = "dead"

    @staticmethod
    def _reap(handle: _Handle) -> None:
        handle.process.join(5.0)
        if handle.process.is_alive():
            log.warning("%s still running after shutdown; killing it", handle.describe())
            handle.process.kill()
            handle.process.join(5.0)
        handle.conn.close()

    # requests

    async def reset(self, task_id: str, *, options: dict[str, Any] | None = None, with_valid_actions: bool = False,
                    session_id: str | None = None) -> dict[str, Any]:
        """Start an episode: in a new session (a new env), or again in ``session_id`` (its env reused).

        ``options``: the env's reset options (``spec.reset_options``; None values are left out).
        Returns the worker's reply plus ``session_id``.
        """
        self.spec.check_task_id(task_id)
        options = {k: v for k, v in (options or {}).items() if v is not None}
        unknown = sorted(set(options) - set(self.spec.reset_options))
        if unknown:
            raise BadRequest(f"unknown reset option(s) {', '.join(unknown)}; {self.spec.name} takes "
                             f"{', '.join(self.spec.reset_options) or 'none'}")
        self.counts["resets"] += 1
        args = {"task_id": task_id, "options": options, "with_valid_actions": with_valid_actions}
        if session_id is not None:
            session = self._session(session_id)
            reply = await self._session_call(session, "reset", args)
            session.task_id = task_id
            reply.setdefault("info", {})["worker"] = session.handle.index
            return {"session_id": session.id, **reply}
        handle = self._pick_worker()
        new_id = uuid.uuid4().hex
        handle.reserved += 1
        try:
            reply = await self._locked_call(handle, "reset", {"session_id": new_id, **args})
        finally:
            handle.reserved -= 1
        if handle.state != "ready":  # died while we waited; the reply cannot be trusted
            raise SessionLost(f"session {new_id} was lost: {handle.died}")
        self._sessions[new_id] = _Session(new_id, handle, task_id, last_used=time.monotonic())
        handle.sessions.add(new_id)
        self.counts["sessions_opened"] += 1
        reply.setdefault("info", {})["worker"] = handle.index
        log.info("session %s: %s on %s (%d/%d sessions)", new_id, task_id, handle.describe(), len(self._sessions),
                 self.config.capacity)
        return {"session_id": new_id, **reply}

    async def step(self, session_id: str, action: str, *, with_valid_actions: bool = False) -> dict[str, Any]:
        session = self._session(session_id)
        self.counts["steps"] += 1
        return await self._session_call(session, "step", {"action": action, "with_valid_actions": with_valid_actions})

    async def close_session(self, session_id: str) -> None:
        """Close a session and free its env."""
        session = self._session(session_id)
        self._forget(session, UnknownSession, f"session {session_id} was closed")
        self.counts["sessions_closed"] += 1
        await self._close_on_worker(session)

    async def expire_idle(self, now: float | None = None) -> list[str]:
        """Close the sessions idle for longer than the idle timeout (``now``: a ``time.monotonic()`` value)."""
        now = time.monotonic() if now is None else now
        idle = [s for s in self._sessions.values()
                if s.busy == 0 and now - s.last_used > self.config.idle_timeout_s]
        for session in idle:
            self._forget(session, SessionExpired,
                         f"session {session.id} ({session.task_id}) expired after {self.config.idle_timeout_s:g} s "
                         "without a request and was closed; reset a new one")
            log.info("session %s (%s) expired", session.id, session.task_id)
            self.counts["sessions_expired"] += 1
        await asyncio.gather(*(self._close_on_worker(s) for s in idle))
        return [s.id for s in idle]

    def session_ids(self) -> list[str]:
        """Ids of the live sessions."""
        return list(self._sessions)

    def health(self) -> dict[str, Any]:
        workers = [{"index": h.index, "pid": h.pid, "state": h.state, "alive": h.process.is_alive(),
                    "sessions": len(h.sessions)} for h in self._handles]
        alive = sum(w["state"] == "ready" and w["alive"] for w in workers)
        status = "ok" if alive == len(workers) else ("degraded" if alive else "down")
        return {"status": status, "workers_alive": alive, "workers_total": len(workers), "sessions": len(self._sessions),
                "capacity": self.config.capacity, "max_sessions_per_worker": self.config.max_sessions_per_worker,
                "idle_timeout_s": self.config.idle_timeout_s, "env": self.spec.name,
                "worker_restarts": self.restarts, "workers": workers}

    def has_capacity(self) -> bool:
        return any(h.state == "ready" and h.load < self.config.max_sessions_per_worker for h in self._handles)

    async def wait_for_capacity(self, timeout_s: float | None = None) -> None:
        """Wait until a ready worker has room for a session (e.g. the replacement of a crashed one).

        Raises NoCapacity after ``timeout_s`` (default: the start timeout).
        """
        timeout_s = self.config.start_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while not self.has_capacity():
            self._ready_changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoCapacity(f"no worker had room for a session within {timeout_s:g} s")
            for handle in self._handles:
                if handle.state == "dead":
                    self._schedule_replacement(handle.index)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready_changed.wait(), timeout=min(remaining, 1.0))

    # internals

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if session_id in self._tombstones:
            kind, message = self._tombstones[session_id]
            raise kind(message)
        raise UnknownSession(f"unknown session {session_id!r}; reset to start one")

    def _pick_worker(self) -> _Handle:
        ready = [h for h in self._handles if h.state == "ready"]
        if not ready:
            raise NoCapacity(f"no worker is ready ({len(self._handles)} starting or restarting); retry shortly")
        handle = min(ready, key=lambda h: (h.load, h.index))
        if handle.load >= self.config.max_sessions_per_worker:
            raise NoCapacity(f"all {len(ready)} ready worker(s) hold {self.config.max_sessions_per_worker} sessions "
                             f"(capacity {self.config.capacity}); close sessions or wait for idle ones to expire "
                             f"({self.config.idle_timeout_s:g} s)")
        return handle

    def _forget(self, session: _Session, kind: type[EnvError], message: str) -> None:
        self._sessions.pop(session.id, None)
        session.handle.sessions.discard(session.id)
        self._tombstones[session.id] = (kind, message)
        while len(self._tombstones) > MAX_TOMBSTONES:
            self._tombstones.popitem(last=False)

    async def _session_call(self, session: _Session, op: str, args: dict[str, Any]) -> dict[str, Any]:
        session.busy += 1
        try:
            return await self._locked_call(session.handle, op, {"session_id": session.id, **args})
        except SessionLost as exc:
            if session.id in self._sessions:  # its env failed: the worker dropped the session
                self._forget(session, SessionLost, f"session {session.id} ({session.task_id}) was lost: {exc}")
            kind, message = self._tombstones.get(session.id, (SessionLost, str(exc)))
            raise kind(message) from None
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    async def _locked_call(self, handle: _Handle, op: str, args: dict[str, Any]) -> dict[str, Any]:
        async with handle.lock:  # FIFO: a busy worker serves requests in arrival order
            return await self._call(handle, op, args, timeout_s=self.config.request_timeout_s)

    async def _call(self, handle: _Handle, op: str, args: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        if handle.state != "ready":
            raise SessionLost(handle.died or f"{handle.describe()} is {handle.state}")
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(self._executor, _roundtrip, handle, (op, args), timeout_s)
        except _WorkerDied as exc:
            self._worker_died(handle, str(exc))
            raise SessionLost(str(exc)) from None
        if reply[0] == "ok":
            return reply[1]
        _, kind, message = reply
        self.counts[f"errors_{kind}"] += 1
        raise ERROR_KINDS.get(kind, WorkerFailure)(message)

    async def _close_on_worker(self, session: _Session) -> None:
        handle = session.handle
        try:
            async with handle.lock:
                await self._call(handle, "close", {"session_id": session.id}, timeout_s=self.config.request_timeout_s)
        except EnvError as exc:  # the worker or its env is gone already: nothing left to free
            log.warning("closing session %s on %s: %s", session.id, handle.describe(), exc)

    def _worker_died(self, handle: _Handle, why: str) -> None:
        """Mark a worker dead, lose its sessions with a message naming the crash, start a replacement."""
        if handle.state == "dead":
            return
        handle.state, handle.died = "dead", why
        lost = [self._sessions[sid] for sid in list(handle.sessions) if sid in self._sessions]
        for session in lost:
            self._forget(session, SessionLost, f"session {session.id} ({session.task_id}) was lost: {why}; "
                                               "reset a new one")
        log.error("%s; %d session(s) lost", why, len(lost))
        self.counts["sessions_lost"] += len(lost)
        self.counts["worker_deaths"] += 1
        if handle.process.is_alive():
            handle.process.kill()
        self._schedule_replacement(handle.index)

    def _schedule_replacement(self, index: int) -> None:
        if self._stopping or index in self._replacing:
            return
        if time.monotonic() - self._last_restart.get(index, -RESTART_BACKOFF_S) < RESTART_BACKOFF_S:
            return  # the sweeper tries again later
        self._last_restart[index] = time.monotonic()
        task = asyncio.create_task(self._replace(index), name=f"{self.spec.name}-replace-{index}")
        self._replacing[index] = task
        task.add_done_callback(lambda _t: self._replacing.pop(index, None))

    async def _replace(self, index: int) -> None:
        old = self._handles[index]
        await asyncio.get_running_loop().run_in_executor(self._executor, self._reap, old)
        handle = self._spawn(index)
        handle.died = old.died
        self._handles[index] = handle
        try:
            await self._wait_ready(handle)
        except RuntimeError as exc:
            handle.state = "dead"
            log.error("replacement of worker %d failed: %s", index, exc)
            return
        self.restarts += 1
        log.warning("worker %d replaced (pid %s -> %s)", index, old.pid, handle.pid)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            for handle in self._handles:
                if handle.state == "ready" and not handle.lock.locked() and not handle.process.is_alive():
                    self._worker_died(handle, f"{handle.describe()} died ({_exit_reason(handle.process)})")
                elif handle.state == "dead":
                    self._schedule_replacement(handle.index)
            await self.expire_idle()
