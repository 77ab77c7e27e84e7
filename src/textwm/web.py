"""The HTTP layer the three servers share (WM server, WM proxy, env server): access control, limits, errors.

Every request passes one ASGI middleware (:class:`Guard`) before any route runs:

* a request id (``X-Request-Id``), echoed in every error body;
* ``Host`` must be a loopback name when the server is bound to loopback (a web page open in a browser
  cannot reach it by DNS rebinding);
* with an API key, ``Authorization: Bearer <key>`` on every route but ``/health``;
* a POST must be ``Content-Type: application/json`` (a browser's ``text/plain`` form post is refused);
* the body is at most ``max_body_bytes`` (413), read before the route sees it.

:func:`read_json_body` then turns the body into a JSON object with limits of its own (nesting depth,
integer digits, lone surrogates: all 400, never a 500). Errors are one shape,
``{"error": {"message", "type", "code", "request_id"}}``, with the message bounded and local paths cut
(:func:`error_response`); an unexpected exception is a 500 with the request id (the traceback goes to
the log). Every response is counted by status (:attr:`Guard.statuses`), for each server's ``/metrics``.
``/docs`` and ``/openapi.json`` are off unless asked for.

A server bound to a non-loopback address without an API key is refused (:func:`check_bind`) unless it
is started with ``--allow-unauthenticated``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from textwm.config import ConfigError, option

log = logging.getLogger(__name__)

#: Longest error message returned (the log keeps the whole one).
MAX_ERROR_CHARS = 400
#: Deepest JSON nesting accepted in a request body.
MAX_JSON_DEPTH = 64
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
#: Seconds our servers keep an idle connection open: longer than clients keep one for reuse (ours: 2 s,
#: ``textwm.clients.retry.CLIENT_KEEPALIVE_S``; httpx's default: 5 s), so that a server never closes a connection
#: as a client reuses it (a reset with no response: uvicorn's default, 5 s, equals httpx's default expiry).
SERVER_KEEPALIVE_S = 75
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/'\"]+/)+")


@dataclass(frozen=True)
class ServerSecurity:
    """Access control and request limits of a server (its ``--api-key`` ... flags)."""

    api_key: str = option("", "bearer token every request must carry (Authorization: Bearer ...); off when empty",
                          env="TEXTWM_API_KEY", secret=True)
    allow_unauthenticated: bool = option(False, "serve a non-loopback address without --api-key (anyone who "
                                                "reaches the port may use the server)")
    docs: bool = option(False, "serve the interactive /docs and /openapi.json")
    max_body_bytes: int = option(4_000_000, "largest request body in bytes (larger: 413)")

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, security: ServerSecurity) -> None:
    """Refuse to serve a non-loopback address without an API key unless the user said so explicitly."""
    if not is_loopback(host) and not security.api_key and not security.allow_unauthenticated:
        raise ConfigError(f"binding {host} (not loopback) without an API key would let anyone who reaches the port "
                          "use this server; give --api-key (or $TEXTWM_API_KEY), or pass --allow-unauthenticated",
                          key="--host")


def docs_urls(security: ServerSecurity) -> dict[str, str | None]:
    """FastAPI's docs arguments: off unless ``security.docs``."""
    on = security.docs
    return {"docs_url": "/docs" if on else None, "redoc_url": None, "openapi_url": "/openapi.json" if on else None}


# --- errors ---------------------------------------------------------------------------------------


def clean_message(message: str) -> str:
    """An error message fit for a client: local directory paths cut to their last part, length bounded."""
    text = _ABSOLUTE_PATH.sub("", str(message))
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + f"... ({len(text)} characters)"


def error_body(message: str, kind: str, code: int, request_id: str | None = None) -> dict[str, Any]:
    """The one error shape (OpenAI-style, plus the request id)."""
    body: dict[str, Any] = {"message": clean_message(message), "type": kind, "code": code}
    if request_id:
        body["request_id"] = request_id
    return {"error": body}


def error_response(request: Any, status: int, message: str, kind: str, headers: dict[str, str] | None = None):
    from fastapi.responses import JSONResponse  # serving extra: see make_app

    rid = getattr(getattr(request, "state", None), "request_id", None)
    if status == 503:
        headers = {"Retry-After": "1", **(headers or {})}
    return JSONResponse(status_code=status, content=error_body(message, kind, status, rid), headers=headers)


class BadBody(ValueError):
    """A request body that is not a JSON object within the limits (400)."""


def _check_strings(value: Any, depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise BadBody(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadBody("a string holds a lone surrogate (not valid Unicode text)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, depth + 1)
            _check_strings(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_strings(v, depth + 1)


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    """Python's JSON reader takes ``NaN`` and ``Infinity``; JSON has no such numbers, and a non-finite setting
    cannot be sampled with nor written back."""
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    """A JSON number too large for a float (``1e999``) reads as infinity in Python: refused as well."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NonFinite(f"{text[:40]} (beyond a float)")
    return value


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object; :class:`BadBody` for anything else (with the reason)."""
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float) if raw.strip() else {}
    except _NonFinite as exc:
        raise BadBody(f"{exc} is not a JSON number: send a finite value") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise BadBody(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BadBody(f"unreadable JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody("the request body must be a JSON object")
    _check_strings(body)
    return body


async def read_json_body(request: Any) -> dict[str, Any]:
    return parse_json_object(await request.body())


def validation_message(exc: Any) -> str:
    """A pydantic ValidationError as ``field: what is wrong; ...`` (the input itself left out)."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


async def finished_before_client_left(request: Any, work: Any) -> bool:
    """Wait for ``work`` (a future) or the client's disconnect, whichever comes first (the request's body is read
    already: its next message is the disconnect). True when ``work`` finished; else it is cancelled (an upstream
    call's connection closed, a coroutine stopped) and nobody is left to read an answer."""
    async def client_gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()
    return work.done() and not work.cancelled()


# --- the middleware -----------------------------------------------------------------------------------


class _TooLarge(Exception):
    """A body read past ``max_body_bytes`` (a chunked body has no Content-Length to refuse it by first)."""


class Guard:
    """ASGI middleware: request id, Host check, bearer token, JSON content type, body size, status counts.

    Args:
        app: the FastAPI app.
        security: the server's limits and key.
        allowed_hosts: Host names accepted (None: any; the CLIs pass the loopback names when bound to loopback).
        open_paths: paths served without the API key.
    """

    def __init__(self, app: Any, security: ServerSecurity, *, allowed_hosts: frozenset[str] | None = None,
                 open_paths: frozenset[str] = frozenset({"/health"})):
        self.app = app
        self.security = security
        self.allowed_hosts = allowed_hosts
        self.open_paths = open_paths
        self.statuses: Counter[int] = Counter()
        app.state.guard = self

    @property
    def state(self) -> Any:
        """The wrapped app's state (``TestClient(guarded).app.state`` works as for the bare app)."""
        return self.app.state

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        status_seen: list[int] = []

        async def send_counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status_seen.append(message["status"])
                message.setdefault("headers", []).append((b"x-request-id", rid.encode()))
            await send(message)

        if refusal is not None:
            await self._send_error(send_counted, *refusal, rid)
        else:
            try:
                await self._serve(scope, receive, send_counted, headers, rid)
            except _TooLarge:
                if not status_seen:
                    await self._send_error(send_counted, 413, f"request body larger than "
                                           f"{self.security.max_body_bytes} bytes", "invalid_request_error", rid)
            except Exception:
                if status_seen:  # the app answered (its handler logged it) and re-raised: nothing left to do
                    pass
                else:
                    log.exception("request %s (%s %s) failed", rid, scope.get("method"), scope.get("path"))
                    await self._send_error(send_counted, 500, f"internal server error (request id {rid}; the "
                                           "server log has the details)", "server_error", rid)
        if status_seen:
            self.statuses[status_seen[0]] += 1

    def _refusal(self, scope: dict, headers: dict[str, str]) -> tuple[int, str, str] | None:
        if self.allowed_hosts is not None and "host" in headers:     # HTTP/1.0 may send none: nothing to check
            host = headers["host"]
            name = (host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]").lower()
            if name not in self.allowed_hosts:
                return 421, f"Host {host[:80]!r} is not served here (this server answers {sorted(self.allowed_hosts)})", \
                    "invalid_request_error"
        key = self.security.api_key
        if key and scope.get("path") not in self.open_paths:
            scheme, _, token = headers.get("authorization", "").strip().partition(" ")
            # The scheme is case-insensitive (RFC 9110 11.1); the token is compared in constant time.
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
                return 401, "missing or wrong API key (send Authorization: Bearer <key>)", "authentication_error"
        has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
        if scope.get("method") == "POST" or (scope.get("method") == "DELETE" and has_body):
            ctype = headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                return 415, f"Content-Type must be application/json, got {ctype or 'none'!r}", "invalid_request_error"
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.security.max_body_bytes:
                return 413, f"request body of {length} bytes is larger than {self.security.max_body_bytes}", \
                    "invalid_request_error"
        return None

    async def _serve(self, scope: dict, receive: Any, send: Any, headers: dict[str, str], rid: str) -> None:
        limit, seen = self.security.max_body_bytes, 0

        async def bounded_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        await self.app(scope, bounded_receive, send)

    @staticmethod
    async def _send_error(send: Any, status: int, message: str, kind: str, rid: str) -> None:
        body = json.dumps(error_body(message, kind, status, rid)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def make_app(title: str, security: ServerSecurity, lifespan: Any = None) -> Any:
    """A FastAPI app with the shared error shape: unknown routes and methods, FastAPI's own validation and any
    unexpected exception answer JSON errors (the last a 500 with the request id), docs off unless asked."""
    # serving extra, ~0.3 s: this module stays light without it (ServerSecurity, check_bind, the limits)
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    app = FastAPI(title=title, lifespan=lifespan, **docs_urls(security))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(request, exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def request_invalid(request: Request, exc: RequestValidationError):
        return error_response(request, 422, validation_message(exc), "invalid_request_error")

    @app.exception_handler(_TooLarge)
    async def too_large(request: Request, exc: _TooLarge):
        # Raised by the guard's bounded receive inside the route's body read; without this handler the catch-all
        # below would make it a 500.
        limit = request.app.state.guard.security.max_body_bytes if hasattr(request.app.state, "guard") else "the"
        return error_response(request, 413, f"request body larger than {limit} bytes", "invalid_request_error")

    @app.exception_handler(Exception)
    async def server_fault(request: Request, exc: Exception):
        rid = getattr(request.state, "request_id", "?")
        log.error("request %s (%s %s) failed: %s: %s", rid, request.method, request.url.path, type(exc).__name__, exc)
        return error_response(request, 500, f"internal server error (request id {rid}; the server log has the "
                                            "details)", "server_error")

    return app


def guard(app: Any, security: ServerSecurity, *, host: str | None = None) -> Guard:
    """Wrap ``app`` in the :class:`Guard`. ``host`` is the bind address: on loopback the Host header must name a
    loopback host; None (in-process tests) checks no Host."""
    allowed = LOOPBACK_NAMES if host is not None and is_loopback(host) else None
    return Guard(app, security, allowed_hosts=allowed)


def render_status_counts(statuses: Counter[int], metric: str, labels: str) -> list[str]:
    """Prometheus lines of the responses counted by status."""
    lines = [f"# HELP {metric} Responses by HTTP status (errors included, each counted once).",
             f"# TYPE {metric} counter"]
    lines += [f'{metric}{{{labels},status="{s}"}} {n}' for s, n in sorted(statuses.items())]
    return lines
