"""The env worker process: real env sessions of one env, served one request at a time over a pipe.

:func:`worker_main` runs in a ``multiprocessing`` process (spawn context) started by
:class:`~textwm.envs.pool.WorkerPool`. It gets the env's spec (pickled) and session config, runs the
spec's :meth:`~textwm.envs.contract.EnvSpec.prepare_worker`, says ready, then answers requests
``(op, args)`` with ``("ok", payload)`` or ``("error", kind, message)``; the kinds are
:data:`textwm.envs.protocol.ERROR_KINDS`. A session whose env fails (:class:`EnvFailed`) is dropped
and closed; the other sessions of the worker go on.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from textwm.envs.contract import EnvSpec
from textwm.envs.protocol import EnvError, EnvFailed, EnvSession, EpisodeOver, UnknownSession

log = logging.getLogger(__name__)


@dataclass
class _Live:
    session: EnvSession
    task_id: str = ""
    done: bool = False
    score: float = 0.0


class SessionHost:
    """The sessions of one worker process and the request handlers (one request at a time)."""

    def __init__(self, spec: EnvSpec, session_config: Any = None):
        self.spec = spec
        self.session_config = session_config
        self.sessions: dict[str, _Live] = {}

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            raise EnvError(f"unknown worker operation {op!r}")
        try:
            return handler(**args)
        except EnvFailed as exc:  # the env behind this session died: this session cannot be trusted any more
            sid = args.get("session_id")
            live = self.sessions.pop(sid, None) if sid else None
            if live is not None:
                _close_quietly(live.session)
            raise EnvFailed(f"the {self.spec.title or self.spec.name} env of session {sid} failed during {op}: "
                            f"{exc}") from exc

    def op_ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "sessions": len(self.sessions)}

    def op_reset(self, session_id: str, task_id: str, options: dict[str, Any], with_valid_actions: bool
                 ) -> dict[str, Any]:
        self.spec.validate_task(task_id, self.session_config)  # before any env start: a bad id costs nothing
        live = self.sessions.get(session_id)
        fresh = live is None
        if fresh:
            live = _Live(self.spec.open_session(self.session_config))
        try:
            result = live.session.reset(task_id, **options)
        except BaseException:
            if fresh:
                _close_quietly(live.session)
            raise
        live.task_id, live.done, live.score = task_id, False, 0.0
        self.sessions[session_id] = live
        reply = {"observation": result.observation, "task_description": result.task_description, "info": result.info}
        if with_valid_actions:
            reply["valid_actions"] = live.session.valid_actions()
        return reply

    def op_step(self, session_id: str, action: str, with_valid_actions: bool) -> dict[str, Any]:
        live = self._live(session_id)
        if live.done:
            raise EpisodeOver(f"the episode of {live.task_id} (session {session_id}) is over (score {live.score:g}); "
                              "reset to play again")
        result = live.session.step(action)
        live.done, live.score = result.done, result.score
        reply = {"observation": result.observation, "score": result.score, "reward": result.reward,
                 "done": result.done, "info": dict(result.info)}
        if with_valid_actions:
            reply["valid_actions"] = live.session.valid_actions()
        return reply

    def op_close(self, session_id: str) -> dict[str, Any]:
        self._live(session_id)
        _close_quietly(self.sessions.pop(session_id).session)
        return {}

    def op_shutdown(self) -> dict[str, Any]:
        self.close_all()
        return {}

    def close_all(self) -> None:
        while self.sessions:
            _close_quietly(self.sessions.popitem()[1].session)

    def _live(self, session_id: str) -> _Live:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise UnknownSession(f"session {session_id} is not on worker pid {os.getpid()}") from None


def _close_quietly(session: EnvSession) -> None:
    try:
        session.close()
    except Exception as exc:  # noqa: BLE001 -- a dead env cannot be closed twice; say so and go on
        log.warning("closing an env session failed: %s: %s", type(exc).__name__, exc)


def worker_main(conn: Connection, index: int, spec: EnvSpec, session_config: Any, log_level: int) -> None:
    """Entry point of a worker process: prepare, say ready, then serve requests until shutdown or EOF."""
    os.setpgrp()  # Ctrl-C at the terminal reaches the server only; it shuts the workers down in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level,
                        format=f"%(asctime)s %(levelname)s {spec.name}-worker-{index}[%(process)d] %(name)s: "
                               "%(message)s")
    if log_level > logging.DEBUG:  # py4j logs every JVM shutdown with a traceback at INFO
        for name in ("py4j", "scienceworld", "textworld"):
            logging.getLogger(name).setLevel(logging.WARNING)
    host = SessionHost(spec, session_config)
    started = time.monotonic()
    try:
        info = spec.prepare_worker()
    except Exception as exc:  # noqa: BLE001 -- reported to the parent, which fails the start with it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", {"pid": os.getpid(), **info}))
    log.info("ready in %.1f s %s", time.monotonic() - started, info or "")
    try:
        while True:
            try:
                op, args = conn.recv()
            except EOFError:
                log.warning("the server went away; closing %d session(s)", len(host.sessions))
                return
            try:
                reply: tuple = ("ok", host.handle(op, args))
            except EnvError as exc:
                reply = ("error", exc.kind, str(exc))
            except Exception as exc:
                log.exception("%s failed", op)
                reply = ("error", "internal", f"{op} failed in worker {index}: {type(exc).__name__}: {exc}")
            conn.send(reply)
            if op == "shutdown":
                return
    finally:
        host.close_all()
