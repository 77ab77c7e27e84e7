"""The real-env server: sessions of any registered env over HTTP, on a pool of worker processes.

Routes (JSON bodies)::

    POST   /reset    {"task_id", <the env's reset options>?, "with_valid_actions"?, "session_id"?}
                     -> {"session_id", "observation", "task_description", "info", "valid_actions"?}
    POST   /step     {"session_id", "action", "with_valid_actions"?}
                     -> {"observation", "score", "reward", "done", "info", "valid_actions"?}
    DELETE /session  {"session_id"}   (or DELETE /session/{session_id})
    GET    /health   workers alive, sessions, capacity
    GET    /metrics  counters in the Prometheus text format

An env whose spec has a ``paper_form`` (:class:`~textwm.envs.protocol.PaperForm`) is also answered in the
wire form of the paper's server for that env (ScienceWorld: ``POST /`` / ``DELETE /``; ALFWorld: ``/reset``,
``/step``, ``/close`` bodies keyed by ``task_id``), on the same pool: a :class:`KeyedSessions` table maps the
client's key to one of our sessions. Failures there answer as on our routes (non-2xx, the JSON error below),
not as the paper's 200 with ``{"error"}``.

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

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from textwm.config import ConfigCLI, option
from textwm.envs.contract import EnvSpec
from textwm.envs.pool import PoolConfig, WorkerPool
from textwm.envs.protocol import EnvError, PaperForm, SessionLost, UnknownSession
from textwm.envs.registry import spec_from_cli
from textwm.web import (
    SERVER_KEEPALIVE_S,
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


# --- the paper's wire form ----------------------------------------------------------------------------


class KeyedSessions:
    """Sessions named by a key the client picks (the paper's ``task_id``): key -> one of the pool's sessions.

    Requests of one key run one at a time, in arrival order (so two first steps of a key open one session, not
    two). A key whose session ended (closed by id, expired, lost) is forgotten when a request finds that out,
    and the table drops such keys whenever a key is added, so it never holds more than the live sessions and
    the keys added since. State of one server (``app.state.keyed_sessions``), not of the module.
    """

    def __init__(self, pool: WorkerPool):
        self.pool = pool
        self._ids: dict[str, str] = {}
        #: key -> [its lock, requests holding or waiting for it]; an entry lives while a request of the key does.
        self._turns: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def session_of(self, key: str) -> str | None:
        return self._ids.get(key)

    @contextlib.asynccontextmanager
    async def _turn(self, key: str) -> AsyncIterator[None]:
        entry = self._turns.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._turns[key]

    def _add(self, key: str, session_id: str) -> None:
        live = set(self.pool.session_ids())
        self._ids = {k: sid for k, sid in self._ids.items() if sid in live}
        self._ids[key] = session_id

    def _gone(self, key: str, exc: EnvError) -> EnvError:
        """Forget ``key`` (its session ended) and say so in the error the client gets."""
        self._ids.pop(key, None)
        return type(exc)(f"task_id {_task_id_of(key)!r}: {exc}")

    async def start(self, key: str, task_id: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(Re)start ``key`` on ``task_id``: in its session if it has a live one (the env reused), else in a new
        session. Returns (session id, the pool's reset reply)."""
        async with self._turn(key):
            session_id = self._ids.get(key)
            if session_id is not None:
                try:
                    return session_id, await self.pool.reset(task_id, options=options, session_id=session_id)
                except (UnknownSession, SessionLost) as exc:
                    self._ids.pop(key, None)
                    log.info("task_id %r: its session %s ended (%s); opening a new one", _task_id_of(key), session_id,
                             exc)
            reply = await self.pool.reset(task_id, options=options)
            self._add(key, reply["session_id"])
            return reply["session_id"], reply

    async def step(self, key: str, action: str, opener: Any = None) -> tuple[str, dict[str, Any]]:
        """Step ``key``'s session; a key without one: 404, or, with ``opener`` (key -> (task id, options)), a new
        session first. Returns (session id, the pool's step reply)."""
        async with self._turn(key):
            session_id = self._ids.get(key)
            if session_id is None:
                if opener is None:
                    raise UnknownSession(f"no session for task_id {_task_id_of(key)!r}; reset it first")
                task_id, options = opener(_task_id_of(key))
                session_id = (await self.pool.reset(task_id, options=options))["session_id"]
                self._add(key, session_id)
            try:
                return session_id, await self.pool.step(session_id, action)
            except (UnknownSession, SessionLost) as exc:
                raise self._gone(key, exc) from None

    async def close(self, key: str) -> str | None:
        """Close ``key``'s session; returns its id, None when the key had no live session (not an error)."""
        async with self._turn(key):
            session_id = self._ids.pop(key, None)
            if session_id is None:
                return None
            try:
                await self.pool.close_session(session_id)
            except (UnknownSession, SessionLost) as exc:  # ended already (expired, lost): nothing left to free
                log.info("task_id %r: session %s had ended already: %s", _task_id_of(key), session_id, exc)
                return None
            return session_id


def owner_key(request: Request, task_id: str) -> str:
    """The table key of a paper-form ``task_id``: scoped to its owner, the API key the client sent (hashed) or,
    without one, the client's address, so that no client steps or closes another's session by guessing its task
    id. (Without an API key, clients of one address are one owner: on loopback, one machine's users.)"""
    scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    owner = ("key:" + hashlib.sha256(token.encode()).hexdigest()[:16] if token else
             "addr:" + (request.client.host if request.client else "?"))
    return f"{owner}\x00{task_id}"


def _task_id_of(key: str) -> str:
    return key.rsplit("\x00", 1)[-1]


#: Our own POST routes; a paper form that uses one of these paths shares it, told apart by the body.
_OWN_POST_PATHS = frozenset({"/reset", "/step"})


class _PaperRoutes:
    """The routes of a spec's :class:`~textwm.envs.protocol.PaperForm` on one app, over :class:`KeyedSessions`."""

    def __init__(self, form: PaperForm, keyed: KeyedSessions, parse: Any, env_error: Any):
        self.form, self.keyed, self._parse, self._env_error = form, keyed, parse, env_error
        key = (str, Field(min_length=1, description="the client's name of the session (the paper's task_id)"))
        self.step_model = create_model("PaperStepRequest", __base__=_Request, task_id=key,
                                       action=(str | None, Field(default=None)))
        self.reset_model = create_model("PaperResetRequest", __base__=_Request, task_id=key,
                                        **{f: (str | None, Field(default=None)) for f in form.reset_fields})
        self.close_model = create_model("PaperCloseRequest", __base__=_Request, task_id=key)

    def mount(self, app: FastAPI) -> None:
        """Routes for the form's paths that are not ours (a shared path dispatches in our handler)."""
        for path in self.form.step_paths:
            if path not in _OWN_POST_PATHS:
                app.post(path)(self._own_step)
        for path in self.form.reset_paths:
            if path not in _OWN_POST_PATHS:
                app.post(path)(self._own_reset)
        for path in self.form.close_paths:
            app.delete(path)(self.close)

    def claims_step(self, request: Request, body: dict[str, Any]) -> bool:
        return request.url.path in self.form.step_paths and "task_id" in body and "session_id" not in body

    def claims_reset(self, request: Request, body: dict[str, Any]) -> bool:
        return request.url.path in self.form.reset_paths and any(f in body for f in self.form.reset_fields)

    async def _own_step(self, request: Request):
        return await self.step(request, None)

    async def _own_reset(self, request: Request):
        return await self.reset(request, None)

    async def step(self, request: Request, body: dict[str, Any] | None):
        req = await self._parse(request, self.step_model, body)
        if isinstance(req, JSONResponse):
            return req
        action = self.form.default_action if req.action is None else req.action
        try:
            _, reply = await self.keyed.step(owner_key(request, req.task_id), action,
                                             self.form.start_of_key if self.form.open_on_step else None)
        except EnvError as exc:
            return self._env_error(request, exc)
        return JSONResponse(self.form.step_reply(reply))        # the pool's session id stays inside

    async def reset(self, request: Request, body: dict[str, Any] | None):
        req = await self._parse(request, self.reset_model, body)
        if isinstance(req, JSONResponse):
            return req
        fields = req.model_dump()
        try:
            task_id, options = self.form.start_of_reset(fields)
            _, reply = await self.keyed.start(owner_key(request, req.task_id), task_id, options)
        except EnvError as exc:
            return self._env_error(request, exc)
        return JSONResponse(self.form.reset_reply(reply, fields))

    async def close(self, request: Request):
        req = await self._parse(request, self.close_model)
        if isinstance(req, JSONResponse):
            return req
        try:
            await self.keyed.close(owner_key(request, req.task_id))
        except EnvError as exc:
            return self._env_error(request, exc)
        return {"status": "closed"}


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

    async def parse(request: Request, model: type[_Request], body: Any = None) -> Any:
        """The validated body (read unless given), or the JSONResponse to send back (400 malformed JSON, 422
        schema)."""
        try:
            return model.model_validate(await read_json_body(request) if body is None else body)
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        except ValidationError as exc:
            return error_response(request, 422, validation_message(exc), "invalid_request_error")

    paper = spec.paper_form
    paper_routes = _PaperRoutes(paper, KeyedSessions(pool), parse, env_error) if paper is not None else None
    if paper_routes is not None:
        app.state.keyed_sessions = paper_routes.keyed
        paper_routes.mount(app)

    async def body_of(request: Request) -> dict[str, Any] | JSONResponse:
        try:
            return await read_json_body(request)
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")

    @app.post("/reset")
    async def reset(request: Request):
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        if paper_routes is not None and paper_routes.claims_reset(request, body):
            return await paper_routes.reset(request, body)
        req = await parse(request, ResetRequest, body)
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
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        if paper_routes is not None and paper_routes.claims_step(request, body):
            return await paper_routes.step(request, body)
        req = await parse(request, StepRequest, body)
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

    log.info("%s env server on %s:%d: %s", spec.name, config.host, config.port, pool_config)
    app = create_env_app(spec, pool_config, getattr(config, "session", None), config.security, host=config.host)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_keep_alive=SERVER_KEEPALIVE_S)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
