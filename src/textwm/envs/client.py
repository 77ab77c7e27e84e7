"""Synchronous client of the env server (:mod:`textwm.envs.server`, any env), an :class:`EnvSession` over HTTP.

One :class:`EnvClient` plays one session at a time: the first ``reset`` opens a session (an env on
the server), later resets play the new task in the same session (no env start), ``close`` ends it.

Retries (with :class:`~textwm.clients.retry.RetryPolicy` backoff) cover connection errors
and 5xx answers; 4xx answers are never retried. Two exceptions keep retries from doing harm:
a ``session_lost`` answer (502: the session died with its worker) is final, and a step is retried
only when it cannot have reached the env (the connection was never made, or the server answered
503), so an action is never applied twice. Every failure raises :class:`EnvServerError` (an
:class:`~textwm.envs.protocol.EnvError`) carrying the server's message and status.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

from textwm.clients.retry import (
    CLIENT_KEEPALIVE_S,
    TRANSIENT_STATUS,
    Deadline,
    RetryPolicy,
    retryable_transport,
)
from textwm.envs.protocol import EnvError, ResetResult, StepResult

log = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:30003"
#: Transport errors raised before the request reached the server: safe to retry any request.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class EnvServerError(EnvError):
    """The env server refused or failed a request (``status`` None: it could not be reached)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        #: The server's error type (``session_not_found``, ``episode_over``, ``session_lost``, ...).
        self.kind = kind
        self.attempts = attempts


class EnvClient:
    """Sync client of one env-server session; ``with EnvClient(url) as env: env.reset("boil_v0")``.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:30003``.
        timeout_s: seconds a request may take, retries included (a reset may start an env process: allow
            several seconds); a read timeout is not retried.
        retry: retries on connection errors and 5xx (see the module docstring).
        options: reset options sent with every reset unless a reset names its own (ScienceWorld:
            ``{"simplification": "easy"}``; none: the server's defaults).
        http: an ``httpx.Client`` to use instead of a new one (tests pass FastAPI's TestClient).
        api_key: bearer token of a server started with ``--api-key``.
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout_s: float = 60.0, retry: RetryPolicy = RetryPolicy(),
                 options: dict[str, Any] | None = None, http: httpx.Client | None = None, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self.timeout_s = timeout_s
        self.options = dict(options or {})
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(limits=httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=CLIENT_KEEPALIVE_S))
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.session_id: str | None = None

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self, task_id: str, *, with_valid_actions: bool = False, **options: Any) -> ResetResult:
        """Start ``task_id`` (``boil_v0``, ``boil_v0_gen3``): in this client's session if it has one.

        ``options``: the env's reset options for this reset (over the client's own)."""
        body: dict[str, Any] = {"task_id": task_id, "with_valid_actions": with_valid_actions}
        body.update({k: v for k, v in {**self.options, **options}.items() if v is not None})
        data = None
        if self.session_id is not None:
            try:
                data = self._request("POST", "/reset", {**body, "session_id": self.session_id})
            except EnvServerError as exc:
                if exc.kind not in ("session_not_found", "session_lost"):
                    raise
                log.info("session %s is gone (%s); opening a new one", self.session_id, exc)
                self.session_id = None
        if data is None:
            data = self._request("POST", "/reset", body)
        self.session_id = data["session_id"]
        info = {**data.get("info", {}), "session_id": data["session_id"]}
        if "valid_actions" in data:
            info["valid_actions"] = data["valid_actions"]
        return ResetResult(observation=data["observation"], task_description=data["task_description"], info=info)

    def step(self, action: str, *, with_valid_actions: bool = False) -> StepResult:
        if self.session_id is None:
            raise EnvError("reset() before stepping: this client has no session")
        data = self._request("POST", "/step", {"session_id": self.session_id, "action": action,
                                               "with_valid_actions": with_valid_actions}, replayable=False)
        info = dict(data.get("info", {}))
        if "valid_actions" in data:
            info["valid_actions"] = data["valid_actions"]
        return StepResult(observation=data["observation"], reward=data["reward"], score=data["score"],
                          done=data["done"], info=info)

    def end_session(self) -> None:
        """Close the current session on the server (a session that is gone already is fine)."""
        if self.session_id is None:
            return
        session_id, self.session_id = self.session_id, None
        try:
            self._request("DELETE", f"/session/{session_id}")
        except EnvServerError as exc:
            if exc.kind not in ("session_not_found", "session_lost"):
                raise
            log.debug("session %s was gone already: %s", session_id, exc)

    def close(self) -> None:
        """End the session and release the HTTP connection pool."""
        try:
            self.end_session()
        finally:
            if self._owns_http:
                self._http.close()

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 replayable: bool = True) -> dict[str, Any]:
        """One request with retries; ``replayable=False``: retry only what cannot have reached the env."""
        url = self.base_url + path
        deadline = Deadline(self.timeout_s)
        attempt = 0
        while True:
            attempt += 1
            try:
                # A client of our own gets the deadline; one passed in (a test's TestClient) keeps its settings.
                limit = {"timeout": deadline.timeout(5.0)} if self._owns_http else {}
                resp = self._http.request(method, url, json=body, headers=self._headers, **limit)
            except httpx.TransportError as exc:
                error = EnvServerError(f"env server at {self.base_url} unreachable: {type(exc).__name__}: "
                                       f"{exc or 'no detail'}", attempts=attempt)
                retry = (replayable or isinstance(exc, _NOT_SENT)) and retryable_transport(exc)
            else:
                if resp.status_code == 200:
                    return resp.json()
                error = _server_error(resp, attempt)
                retry = (resp.status_code in TRANSIENT_STATUS and resp.status_code >= 500
                         and error.kind != "session_lost" and (replayable or resp.status_code == 503))
            pause = deadline.pause(self.retry.delay(attempt)) if retry and attempt <= self.retry.max_retries else None
            if pause is None:
                if attempt > 1:
                    error.args = (f"{error} (after {attempt} attempts)",)
                raise error
            log.warning("%s %s failed (%s); retry %d/%d", method, path, error, attempt, self.retry.max_retries)
            time.sleep(pause)


def _server_error(resp: httpx.Response, attempt: int) -> EnvServerError:
    """The server's ``{"error": {"message", "type"}}`` as an exception (or the raw text if not JSON)."""
    try:
        err = resp.json()["error"]
        message, kind = str(err["message"]), err.get("type")
    except (ValueError, KeyError, TypeError):
        message, kind = resp.text[:300], None
    return EnvServerError(f"HTTP {resp.status_code}: {message}", status=resp.status_code, kind=kind, attempts=attempt)
