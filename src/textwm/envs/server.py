"""The real-env server: sessions of any registered env over HTTP, on a pool of worker processes.

Routes (JSON bodies)::

    POST   /reset    {"task_id", <the env's reset options>?, "with_valid_actions"?, "session_id"?}
                     -> {"session_id", "observation", "task_description", "info", "valid_actions"?}
    POST   /step     {"session_id", "action", "with_valid_actions"?}
                     -> {"observation", "score", "reward", "done", "info", "valid_actions"?}
    DELETE /session  {"session_id"}   (or DELETE /session/{session_id})
    GET    /health   workers alive, sessions, capacity
    GET    /metrics  counters in the Prometheus text format

A reset without ``session_id`` opens a new session (a new env on a worker); with one, it plays the
new task in that session's env. Every reset without ``session_id`` is its own session, so parallel
copies of one task never share state.

Errors are ``{"error": {"message", "type", "code"}}`` with the statuses of
:mod:`textwm.envs.protocol`: 400 malformed JSON, unknown task id or reset option (the message says
what is valid); 404 unknown, closed or expired session; 409 step after the episode ended; 422 a body
that breaks the schema; 500 unexpected worker error; 502 ``session_lost`` (the session's worker or
env died; the message names the crash; reset a new session); 503 no capacity (``Retry-After``).

    python -m textwm.envs.server --env sciworld --port 30003 --workers 2
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from textwm.config import ConfigCLI, option
from textwm.envs.contract import EnvSpec
from textwm.envs.pool import PoolConfig, WorkerPool
from textwm.envs.protocol import EnvError
from textwm.envs.registry import spec_from_cli
from textwm.web import (
    BadBody,
    Guard,
    ServerSecurity,
    check_bind,
    error_response,
    guard,
    make_app,
    read_json_body,
    render_status_counts,
    validation_message,
)

log = logging.getLogger(__name__)

DEFAULT_PORT = 30003
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


# --- wire format ------------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt flag is an error, not a silent default

    @field_validator("*", mode="before")
    @classmethod
    def _text_fields_are_text(cls, value: Any, info: Any) -> Any:
        field = cls.model_fields[info.field_name]
        if field.annotation in (str, str | None) and value is not None and not isinstance(value, str):
            raise ValueError(f"{info.field_name} must be a string, got {type(value).__name__} "
                             f"({json.dumps(value)[:60]})")
        return value


class _ResetBase(_Request):
    task_id: str = Field(description="the env's task id, e.g. boil_v0")
    with_valid_actions: bool = Field(default=False, strict=True)
    session_id: str | None = Field(default=None, description="reuse this session's env for the new episode")


class StepRequest(_Request):
    session_id: str
    action: str = Field(description="the command, e.g. 'open door to kitchen'")
    with_valid_actions: bool = Field(default=False, strict=True)


class CloseRequest(_Request):
    session_id: str


class ResetResponse(BaseModel):
    session_id: str
    observation: str
    task_description: str
    info: dict[str, Any] = Field(default_factory=dict)
    valid_actions: list[str] | None = None


class StepResponse(BaseModel):
    observation: str
    #: Task score after the step.
    score: float
    #: Change of score caused by the step.
    reward: float
    done: bool
    info: dict[str, Any] = Field(default_factory=dict)
    valid_actions: list[str] | None = None


def reset_request_model(spec: EnvSpec) -> type[_ResetBase]:
    """The ``/reset`` body of ``spec``: the common fields plus the env's reset options (optional strings)."""
    options: dict[str, Any] = {name: (str | None, Field(default=None, description=f"{spec.name} reset option"))
                               for name in spec.reset_options}
    return create_model(f"{spec.class_prefix or spec.name}ResetRequest", __base__=_ResetBase, **options)


# --- the app ----------------------------------------------------------------------------------------


def create_env_app(spec: EnvSpec, pool_config: PoolConfig, session_config: Any = None,
                   security: ServerSecurity = ServerSecurity(), *, host: str | None = None) -> Guard:
    """The env server for ``spec`` as an ASGI app behind the shared HTTP layer; starting it starts the worker
    pool (and waits for it). ``host``: the bind address (for the Host check)."""
    pool = WorkerPool(spec, pool_config, session_config)
    ResetRequest = reset_request_model(spec)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            await pool.stop()

    app = make_app(f"textwm {spec.title or spec.name} env server", security, lifespan)
    app.state.pool = pool

    def env_error(request: Request, exc: EnvError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%d %s: %s", exc.status, exc.http_type, exc)
        return error_response(request, exc.status, str(exc), exc.http_type)

    async def parse(request: Request, model: type[_Request]) -> Any:
        """The validated body, or the JSONResponse to send back (400 malformed JSON, 422 schema)."""
        try:
            return model.model_validate(await read_json_body(request))
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        except ValidationError as exc:
            return error_response(request, 422, validation_message(exc), "invalid_request_error")

    @app.post("/reset")
    async def reset(request: Request):
        req = await parse(request, ResetRequest)
        if isinstance(req, JSONResponse):
            return req
        options = {name: getattr(req, name) for name in spec.reset_options}
        try:
            reply = await pool.reset(req.task_id, options=options, with_valid_actions=req.with_valid_actions,
                                     session_id=req.session_id)
        except EnvError as exc:
            return env_error(request, exc)
        return JSONResponse(ResetResponse(**reply).model_dump(exclude_none=True))

    @app.post("/step")
    async def step(request: Request):
        req = await parse(request, StepRequest)
        if isinstance(req, JSONResponse):
            return req
        try:
            reply = await pool.step(req.session_id, req.action, with_valid_actions=req.with_valid_actions)
        except EnvError as exc:
            return env_error(request, exc)
        return JSONResponse(StepResponse(**reply).model_dump(exclude_none=True))

    async def close(request: Request, req: CloseRequest | JSONResponse):
        if isinstance(req, JSONResponse):
            return req
        try:
            await pool.close_session(req.session_id)
        except EnvError as exc:
            return env_error(request, exc)
        return {"session_id": req.session_id, "closed": True}

    @app.delete("/session")
    async def close_by_body(request: Request):
        return await close(request, await parse(request, CloseRequest))

    @app.delete("/session/{session_id}")
    async def close_by_path(session_id: str, request: Request):
        return await close(request, CloseRequest(session_id=session_id))

    @app.get("/health")
    async def health():
        body = pool.health()
        for worker in body["workers"]:
            worker.pop("pid")  # process ids stay in the log; a client has no use for them
        return JSONResponse(body, status_code=200 if body["workers_alive"] else 503)

    @app.get("/metrics")
    async def metrics():
        text = render_metrics(pool) + "\n".join(render_status_counts(
            app.state.guard.statuses, "textwm_env_http_responses_total", f'env="{spec.name}"')) + "\n"
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return guard(app, security, host=host)


def render_metrics(pool: WorkerPool) -> str:
    """The pool's counters and gauges in the Prometheus text exposition format."""
    health = pool.health()
    label = f'env="{pool.spec.name}"'
    lines = ["# HELP textwm_env_events_total Resets, steps, sessions opened/closed/expired/lost, errors by kind.",
             "# TYPE textwm_env_events_total counter"]
    lines += [f'textwm_env_events_total{{{label},event="{k}"}} {v}' for k, v in sorted(pool.counts.items())]
    for name, key, text in (("sessions", "sessions", "Live sessions."),
                            ("capacity", "capacity", "Sessions the pool can hold."),
                            ("workers_alive", "workers_alive", "Worker processes ready."),
                            ("worker_restarts", "worker_restarts", "Workers replaced after a crash.")):
        lines += [f"# HELP textwm_env_{name} {text}", f"# TYPE textwm_env_{name} gauge",
                  f"textwm_env_{name}{{{label}}} {health[key]}"]
    return "\n".join(lines) + "\n"


# --- command line -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _ServerOptions:
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(DEFAULT_PORT, "port")
    pool: PoolConfig = option(help="workers", default_factory=PoolConfig)
    log_level: str = option("INFO", "log level of the server and its workers", choices=LOG_LEVELS)
    security: ServerSecurity = option(help="access and limits", default_factory=ServerSecurity)

    def __post_init__(self) -> None:
        check_bind(self.host, self.security)


def server_config_class(spec: EnvSpec) -> type:
    """The env server's config for ``spec``: host, port, the pool, and the env's session options."""
    fields: list[Any] = []
    if spec.session_config is not None:
        fields.append(("session", spec.session_config,
                       option(help=f"{spec.name} sessions", default_factory=spec.session_config)))
    return dataclasses.make_dataclass(f"{spec.class_prefix or spec.name}ServerConfig", fields,
                                      bases=(_ServerOptions,))


def main(argv: list[str] | None = None, *, env: str | None = None, prog: str | None = None) -> int:
    """``python -m textwm.envs.server --env NAME ...`` (or an env's wrapper with ``env`` fixed): serve until Ctrl-C."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or "python -m textwm.envs.server"
    spec = spec_from_cli(argv, env, prog, "[flags]")
    if spec is None:
        return 2
    parsed = ConfigCLI(server_config_class(spec), prog=prog, key_values=False,
                       description=f"The real {spec.title or spec.name} env server (sessions on a pool of worker "
                                   "processes).").parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    level = getattr(logging, config.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pool_config = dataclasses.replace(config.pool, log_level=level)

    import uvicorn

    log.info("%s env server on %s:%d: %s", spec.name, config.host, config.port, pool_config)
    app = create_env_app(spec, pool_config, getattr(config, "session", None), config.security, host=config.host)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
