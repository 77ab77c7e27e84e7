"""The real ScienceWorld env server: sessions of ScienceWorld over HTTP, on a pool of worker processes.

Routes (JSON bodies)::

    POST   /reset    {"task_id", "simplification"?, "with_valid_actions"?, "session_id"?}
                     -> {"session_id", "observation", "task_description", "info", "valid_actions"?}
    POST   /step     {"session_id", "action", "with_valid_actions"?}
                     -> {"observation", "score", "reward", "done", "info", "valid_actions"?}
    DELETE /session  {"session_id"}   (or DELETE /session/{session_id})
    GET    /health   workers alive, sessions, capacity

A reset without ``session_id`` opens a new session (a new JVM); with one, it plays the new task in
that session's JVM (no JVM start). Task ids are ``<task>_v<variation>``, optionally with ``_gen<k>``
suffixes: every reset is its own session, so copies of one task never share state.

Errors are ``{"error": {"message", "type", "code"}}``: 400 malformed JSON, unknown task id,
variation out of range or unknown simplification (the message lists what is valid); 404 unknown,
closed or expired session; 409 step after the episode ended; 422 a body that breaks the schema;
500 unexpected worker error; 502 ``session_lost``: the session's worker process died or its JVM
failed (the message names the crash; reset a new session); 503 no capacity (``Retry-After``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from textwm.envs.sciworld.pool import (
    BadRequest,
    EpisodeOver,
    NoCapacity,
    PoolConfig,
    PoolError,
    SessionLost,
    UnknownSession,
    WorkerFailure,
    WorkerPool,
)
from textwm.serving.protocol import error_body

log = logging.getLogger(__name__)

DEFAULT_PORT = 30003

#: Pool error -> (HTTP status, error type). ``session_lost`` tells clients not to retry.
_STATUS: dict[type[PoolError], tuple[int, str]] = {
    BadRequest: (400, "invalid_request_error"),
    UnknownSession: (404, "session_not_found"),
    EpisodeOver: (409, "episode_over"),
    NoCapacity: (503, "server_busy"),
    SessionLost: (502, "session_lost"),
    WorkerFailure: (500, "server_error"),
}


# --- wire format ------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt flag is an error, not a silent default


def _must_be_text(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} ({json.dumps(value)[:60]})")
    return value


class ResetRequest(_Request):
    task_id: str = Field(description="<task>_v<variation>[_gen<k>], e.g. boil_v0")
    simplification: str | None = Field(default=None, description="ScienceWorld simplifications; default: the server's")
    with_valid_actions: bool = Field(default=False, strict=True)
    session_id: str | None = Field(default=None, description="reuse this session's JVM for the new episode")

    @field_validator("task_id", "simplification", "session_id", mode="before")
    @classmethod
    def _text(cls, value: Any, info: Any) -> Any:
        return _must_be_text(info.field_name, value)


class StepRequest(_Request):
    session_id: str
    action: str = Field(description="the command, e.g. 'open door to kitchen'")
    with_valid_actions: bool = Field(default=False, strict=True)

    @field_validator("session_id", "action", mode="before")
    @classmethod
    def _text(cls, value: Any, info: Any) -> Any:
        return _must_be_text(info.field_name, value)


class CloseRequest(_Request):
    session_id: str

    @field_validator("session_id", mode="before")
    @classmethod
    def _text(cls, value: Any, info: Any) -> Any:
        return _must_be_text(info.field_name, value)


class ResetResponse(BaseModel):
    session_id: str
    observation: str
    task_description: str
    info: dict[str, Any] = Field(default_factory=dict)
    valid_actions: list[str] | None = None


class StepResponse(BaseModel):
    observation: str
    #: Task score after the step (-100 on failure, else 0..100).
    score: float
    #: Change of score caused by the step.
    reward: float
    done: bool
    info: dict[str, Any] = Field(default_factory=dict)
    valid_actions: list[str] | None = None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


# --- the app ----------------------------------------------------------------------------------


def create_env_app(pool_config: PoolConfig) -> FastAPI:
    """The env server app; starting it starts the worker pool (and waits for it), stopping it stops it."""
    pool = WorkerPool(pool_config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            await pool.stop()

    app = FastAPI(title="textwm ScienceWorld env server", lifespan=lifespan)
    app.state.pool = pool

    def error(status: int, message: str, kind: str) -> JSONResponse:
        headers = {"Retry-After": "1"} if status == 503 else None
        return JSONResponse(status_code=status, content=error_body(message, kind, status), headers=headers)

    def pool_error(exc: PoolError) -> JSONResponse:
        for cls in type(exc).__mro__:
            if cls in _STATUS:
                status, kind = _STATUS[cls]
                break
        else:
            status, kind = 500, "server_error"
        if status >= 500:
            log.warning("%d %s: %s", status, kind, exc)
        return error(status, str(exc), kind)

    async def parse(request: Request, model: type[_Request], extra: dict[str, Any] | None = None) -> Any:
        """The validated body, or the JSONResponse to send back (400 malformed JSON, 422 schema)."""
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(400, f"malformed JSON body: {exc}", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object", "invalid_request_error")
        try:
            return model.model_validate({**body, **(extra or {})})
        except ValidationError as exc:
            return error(422, _validation_message(exc), "invalid_request_error")

    @app.post("/reset")
    async def reset(request: Request):
        req = await parse(request, ResetRequest)
        if isinstance(req, JSONResponse):
            return req
        try:
            reply = await pool.reset(req.task_id, simplification=req.simplification,
                                     with_valid_actions=req.with_valid_actions, session_id=req.session_id)
        except PoolError as exc:
            return pool_error(exc)
        return JSONResponse(ResetResponse(**reply).model_dump(exclude_none=True))

    @app.post("/step")
    async def step(request: Request):
        req = await parse(request, StepRequest)
        if isinstance(req, JSONResponse):
            return req
        try:
            reply = await pool.step(req.session_id, req.action, with_valid_actions=req.with_valid_actions)
        except PoolError as exc:
            return pool_error(exc)
        return JSONResponse(StepResponse(**reply).model_dump(exclude_none=True))

    async def close(req: CloseRequest | JSONResponse):
        if isinstance(req, JSONResponse):
            return req
        try:
            await pool.close_session(req.session_id)
        except PoolError as exc:
            return pool_error(exc)
        return {"session_id": req.session_id, "closed": True}

    @app.delete("/session")
    async def close_by_body(request: Request):
        return await close(await parse(request, CloseRequest))

    @app.delete("/session/{session_id}")
    async def close_by_path(session_id: str, request: Request):
        return await close(CloseRequest(session_id=session_id))

    @app.get("/health")
    async def health():
        body = pool.health()
        return JSONResponse(body, status_code=200 if body["workers_alive"] else 503)

    return app


# --- command line (sciworld/sciworld_env_server.py) -------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``sciworld/sciworld_env_server.py``: parse flags, build the pool config, serve until Ctrl-C."""
    defaults = PoolConfig()
    p = argparse.ArgumentParser(prog="sciworld/sciworld_env_server.py",
                                description="The real ScienceWorld env server (sessions on a pool of worker "
                                            "processes, one JVM per session).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="(default: %(default)s)")
    p.add_argument("--workers", type=int, default=defaults.workers,
                   help="worker processes; sessions on different workers step in parallel (default: %(default)s)")
    p.add_argument("--max-sessions-per-worker", type=int, default=defaults.max_sessions_per_worker,
                   help="sessions (JVMs, ~400 MB each) per worker; more resets get 503 (default: %(default)s)")
    p.add_argument("--idle-timeout", type=float, default=defaults.idle_timeout_s,
                   help="seconds without a request before a session is closed (default: %(default)s)")
    p.add_argument("--step-limit", type=int, default=defaults.step_limit,
                   help="moves before an episode ends (default: %(default)s)")
    p.add_argument("--simplification", default=defaults.simplification,
                   help="default simplifications for resets that name none (default: %(default)s)")
    p.add_argument("--request-timeout", type=float, default=defaults.request_timeout_s,
                   help="seconds a worker may take for one request before it is killed and replaced")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = p.parse_args(argv)
    level = getattr(logging, args.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = PoolConfig(workers=args.workers, max_sessions_per_worker=args.max_sessions_per_worker,
                            idle_timeout_s=args.idle_timeout, step_limit=args.step_limit,
                            simplification=args.simplification, request_timeout_s=args.request_timeout,
                            log_level=level)
    except ValueError as exc:
        p.error(str(exc))

    import uvicorn

    log.info("ScienceWorld env server on %s:%d: %s", args.host, args.port, config)
    uvicorn.run(create_env_app(config), host=args.host, port=args.port, log_level="warning")
    return 0
