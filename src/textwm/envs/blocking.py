"""The worker pool for synchronous callers: a :class:`~textwm.envs.pool.WorkerPool` on an event loop of its own.

Parallel evaluation plays many real-env episodes at once from plain (blocking) code. A
:class:`BlockingPool` runs the one worker pool (the env server's: the same routing, deadlines and
crash recovery) on an event loop in a background thread, and gives each of its ``slots`` one session
on its own worker, reset again for every episode (the env is reused, not restarted). :meth:`gather`
sends one request per slot and waits for all answers, so the workers step in parallel.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from textwm.envs.contract import EnvSpec
from textwm.envs.pool import PoolConfig, WorkerPool
from textwm.envs.protocol import EnvError, NoCapacity, SessionLost, UnknownSession

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Evaluation sessions are reset for every episode and never idle long; a day keeps the sweeper out of the way.
EVAL_IDLE_TIMEOUT_S = 86_400.0


class BlockingPool:
    """``slots`` worker processes of env ``spec``, one session each, driven from blocking code.

    Use as a context manager, or :meth:`start` / :meth:`close`; :meth:`launch` starts the processes
    without waiting for them (they prepare while the caller does other work).
    """

    def __init__(self, spec: EnvSpec, slots: int = 2, *, session_config: Any = None, start_timeout_s: float = 300.0,
                 request_timeout_s: float = 120.0, log_level: int = logging.WARNING):
        self.spec = spec
        self.config = PoolConfig(workers=slots, max_sessions_per_worker=1, idle_timeout_s=EVAL_IDLE_TIMEOUT_S,
                                 start_timeout_s=start_timeout_s, request_timeout_s=request_timeout_s,
                                 log_level=log_level)
        self.session_config = session_config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: WorkerPool | None = None
        self._started: Future | None = None
        #: The session of each slot (None until its first episode, or after it was lost).
        self._sessions: dict[int, str | None] = {}

    @property
    def slots(self) -> int:
        return self.config.workers

    @property
    def restarts(self) -> int:
        return self._pool.restarts if self._pool is not None else 0

    def __enter__(self) -> BlockingPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def launch(self) -> BlockingPool:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=f"{self.spec.name}-pool-loop",
                                            daemon=True)
            self._thread.start()
            self._pool = self._run(self._create())
            self._started = asyncio.run_coroutine_threadsafe(self._pool.start(), self._loop)
        return self

    async def _create(self) -> WorkerPool:
        pool = WorkerPool(self.spec, self.config, self.session_config)
        pool.launch()
        return pool

    def start(self) -> BlockingPool:
        """Launch the workers (if not yet) and wait until every one is ready."""
        self.launch()
        try:
            self._started.result()
        except BaseException:
            self.close()
            raise
        return self

    def _run(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def gather(self, calls: Mapping[int, Callable[[WorkerPool], Awaitable[T]]]) -> dict[int, T | EnvError]:
        """Run ``{slot: fn(pool)}`` concurrently; each slot's result, or the EnvError it raised."""
        self.start()

        async def all_of() -> list[Any]:
            return await asyncio.gather(*(fn(self._pool) for fn in calls.values()), return_exceptions=True)

        results = self._run(all_of())
        out: dict[int, Any] = {}
        for slot, result in zip(calls, results):
            if isinstance(result, BaseException) and not isinstance(result, EnvError):
                raise result
            out[slot] = result
        return out

    def reset(self, requests: Mapping[int, tuple[str, Mapping[str, Any]]]) -> dict[int, dict[str, Any] | EnvError]:
        """Start ``{slot: (task_id, reset options)}``, each in its slot's session (a new one if it has none)."""
        return self.gather({slot: self._resetter(slot, task_id, dict(options))
                            for slot, (task_id, options) in requests.items()})

    def _resetter(self, slot: int, task_id: str, options: dict[str, Any]):
        async def reset(pool: WorkerPool) -> dict[str, Any]:
            session = self._sessions.get(slot)
            if session is not None:
                try:
                    return await pool.reset(task_id, options=options, session_id=session)
                except (UnknownSession, SessionLost):
                    self._sessions[slot] = None  # its worker died: a new session on the replacement
            while True:
                try:
                    reply = await pool.reset(task_id, options=options)
                except NoCapacity:
                    await pool.wait_for_capacity()
                    continue
                self._sessions[slot] = reply["session_id"]
                return reply
        return reset

    def step(self, actions: Mapping[int, str]) -> dict[int, dict[str, Any] | EnvError]:
        """One step in each addressed slot's session."""
        def stepper(slot: int, action: str):
            async def step(pool: WorkerPool) -> dict[str, Any]:
                session = self._sessions.get(slot)
                if session is None:
                    raise UnknownSession(f"slot {slot} has no session; reset it first")
                return await pool.step(session, action)
            return step
        return self.gather({slot: stepper(slot, action) for slot, action in actions.items()})

    def health(self) -> dict[str, Any]:
        """The pool's ``health()`` (workers with their pids and states, sessions, restarts)."""
        self.start()

        async def health() -> dict[str, Any]:
            return self._pool.health()

        return self._run(health())

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            if self._pool is not None:
                if self._started is not None and not self._started.done():
                    self._started.cancel()
                self._run(self._pool.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            self._loop.close()
            self._loop, self._thread, self._pool, self._started = None, None, None, None
            self._sessions.clear()
