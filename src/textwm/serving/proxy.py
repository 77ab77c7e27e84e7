"""The WM proxy: the paper's world-model payload in, an OpenAI chat completion upstream.

``POST /`` accepts ``{"input": {system_prompt, state, action, max_tokens, num_diffusion_steps?,
diffusion_steps?, temperature?, repetition_penalty?, response_template?}}`` (or the object without ``input``) and
sends upstream the chat request the paper's proxy builds: a system message (if any) and
``State: <state>\\n\\nAction: <action>`` (strings as given, anything else ``json.dumps``),
``chat_template_kwargs: {"enable_thinking": false}``. The model id comes from the upstream's
``/v1/models`` and is resolved again when the upstream answers "unknown model" (it restarted
with another checkpoint) or was unreachable. Diffusion fields are forwarded only to the native
server (lmdeploy takes them per server, vLLM has none).

Success: ``200 {"generated_text", "usage"}``. Failure: a non-2xx status with the shared error body
(:mod:`textwm.web`: 400 bad JSON, 422 a field it does not know or a bad value, 502 upstream
unreachable or failing, 504 no answer within ``--timeout``, the upstream's 4xx passed through); never
an empty text presented as success (the paper's proxies answered 200 ``{"generated_text": "", "error"}``;
its plugins call ``raise_for_status()``, so they see ours as failures). ``--timeout`` bounds the whole
request, retries included (retries only after connection errors and 5xx). ``--upstream-api-key`` is sent
upstream; the proxy's own ``--api-key`` guards it.

``POST /predict`` is the same route: three of the paper's ScienceWorld GRPO scripts and all four AppWorld
ones set ``WM_ENDPOINT=http://localhost:30000/predict`` (the paper's proxies, ``alfworld/wm_proxy.py`` and
``appworld/wm_proxy.py``, answered a POST on any path with one handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from textwm.clients.openai import ChatClient, ChatRequestError, models_url
from textwm.clients.retry import RetryPolicy
from textwm.config import option
from textwm.serving.protocol import WMInput
from textwm.web import (
    BadBody,
    Guard,
    ServerSecurity,
    error_response,
    finished_before_client_left,
    guard,
    make_app,
    read_json_body,
    render_status_counts,
    validation_message,
)

log = logging.getLogger(__name__)

UPSTREAM_KINDS = ("auto", "native", "lmdeploy", "vllm")
#: Paths of the WM payload: ours, and the paper's scripts' ``WM_ENDPOINT=.../predict`` (one handler).
PAYLOAD_PATHS = ("/", "/predict")
#: ``owned_by`` of /v1/models entries -> upstream kind (anything else: treated as vLLM-like).
_OWNER_KINDS = {"textwm": "native", "lmdeploy": "lmdeploy", "vllm": "vllm"}


@dataclass(frozen=True)
class ProxyConfig:
    """What the WM proxy sends where."""

    upstream: str = option("http://127.0.0.1:30001", "the world-model server (OpenAI-compatible)")
    upstream_kind: str = option("auto", "auto: read it from the upstream's /v1/models (owned_by)",
                                choices=UPSTREAM_KINDS)
    timeout_s: float = option(120.0, "seconds a request may take upstream, retries included", flag="--timeout")
    retry: RetryPolicy = option(help="upstream retries",
                                default_factory=lambda: RetryPolicy(max_retries=3, backoff_s=0.25, max_backoff_s=4.0))
    max_connections: int = option(256, "connections to the upstream at most")
    repetition_penalty: float | None = option(None, "sent when a request has none (the paper's proxy used 1.3)")
    upstream_api_key: str = option("", "bearer token sent to the upstream server", env="TEXTWM_UPSTREAM_API_KEY",
                                   secret=True)

    def __post_init__(self) -> None:
        if self.upstream_kind not in UPSTREAM_KINDS:
            raise ValueError(f"upstream kind must be one of {', '.join(UPSTREAM_KINDS)}, got {self.upstream_kind!r}")
        if self.timeout_s <= 0 or self.max_connections < 1:
            raise ValueError(f"timeout ({self.timeout_s}) and max_connections ({self.max_connections}) must be positive")


class ProxyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Upstream:
    """The upstream server: its model id and kind, resolved lazily and again after failures."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.model: str | None = None
        #: The last upstream answer seen by a request or a probe: its HTTP status (None: no answer) and when.
        self.last_status: int | None = None
        self.last_seen: float | None = None
        self.kind: str | None = None if config.upstream_kind == "auto" else config.upstream_kind
        self._lock = asyncio.Lock()
        self._client = ChatClient(config.upstream, timeout_s=config.timeout_s, retry=config.retry,
                                  max_connections=config.max_connections, api_key=config.upstream_api_key or None)
        self._headers = {"Authorization": f"Bearer {config.upstream_api_key}"} if config.upstream_api_key else {}

    async def aclose(self) -> None:
        await self._client.aclose()

    def _saw(self, status: int | None) -> None:
        self.last_status, self.last_seen = status, time.time()

    async def describe(self, timeout_s: float | None = None) -> dict:
        """``GET /v1/models`` of the upstream -> its first model card, within ``timeout_s`` (default: the proxy's
        ``--timeout``). ProxyError: 504 no answer in time, 502 unreachable, refused or listing no model."""
        url = models_url(self.config.upstream)
        try:
            async with httpx.AsyncClient(timeout=timeout_s or self.config.timeout_s, headers=self._headers) as http:
                resp = await http.get(url)
        except httpx.TimeoutException:
            self._saw(None)
            raise ProxyError(504, f"upstream {self.config.upstream} did not answer {url} within "
                                  f"{timeout_s or self.config.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            self._saw(None)
            raise ProxyError(502, f"upstream {self.config.upstream} is unreachable ({type(exc).__name__}: {exc})") \
                from None
        self._saw(resp.status_code)
        if resp.status_code in (401, 403):
            raise ProxyError(502, f"upstream {self.config.upstream} refused the proxy's credentials (HTTP "
                                  f"{resp.status_code}): give the upstream's key with --upstream-api-key")
        try:
            card = resp.json()["data"][0]
            return {"id": str(card["id"]), "owned_by": card.get("owned_by")}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProxyError(502, f"upstream {self.config.upstream} lists no model at {url} (HTTP "
                                  f"{resp.status_code}; {type(exc).__name__}: {exc})") from None

    async def resolve(self, *, force: bool = False, timeout_s: float | None = None) -> str:
        async with self._lock:
            if self.model is None or force:
                card = await self.describe(timeout_s)
                previous, self.model = self.model, card["id"]
                if self.config.upstream_kind == "auto":
                    self.kind = _OWNER_KINDS.get(str(card["owned_by"]), "vllm")
                if previous != self.model:
                    log.info("upstream model: %s (%s)", self.model, self.kind)
            return self.model

    def payload(self, wm: WMInput) -> dict:
        body = {"messages": wm.messages(), "max_tokens": wm.max_tokens, "temperature": wm.temperature,
                "chat_template_kwargs": {"enable_thinking": False}}
        if wm.top_p is not None:
            body["top_p"] = wm.top_p
        penalty = wm.repetition_penalty if wm.repetition_penalty is not None else self.config.repetition_penalty
        if penalty is not None:
            body["repetition_penalty"] = penalty
        if self.kind == "native" and wm.steps() is not None:
            body["num_diffusion_steps"] = wm.steps()
        if wm.response_template is not None:
            if self.kind != "native":
                raise ProxyError(400, f"response_template needs the native server upstream; this upstream is "
                                      f"{self.kind} (lmdeploy and vLLM take no template)")
            body["response_template"] = wm.response_template
        return body

    async def generate(self, wm: WMInput) -> dict:
        model = await self.resolve()
        for attempt in range(2):  # a second try only after re-resolving a changed model
            try:
                result = await self._client.complete(model=model, **self.payload(wm))
            except ChatRequestError as exc:
                self._saw(exc.status)
                if exc.status == 404 and attempt == 0:
                    model = await self.resolve(force=True)
                    continue
                if exc.status is None:
                    self.model = None  # the upstream may come back with another model
                    raise ProxyError(504 if exc.timed_out else 502, f"upstream failed: {exc}") from None
                # The upstream's 4xx passes through; a 5xx, or a 2xx whose body is not a completion, is a bad
                # gateway (never an error body under a success status).
                raise ProxyError(exc.status if 400 <= exc.status < 500 else 502, f"upstream error: {exc}") from None
            self._saw(200)
            if not result.text:
                raise ProxyError(502, "upstream returned an empty completion")
            return {"generated_text": result.text, "usage": result.usage}
        raise ProxyError(502, "upstream kept rejecting the model id")  # pragma: no cover


async def _unless_client_leaves(request: Request, work: Any) -> Any:
    """``work``'s result; None, with ``work`` cancelled (its upstream connection closed, so the upstream drops
    its rows too), when the client closes its connection first."""
    task = asyncio.ensure_future(work)
    return task.result() if await finished_before_client_left(request, task) else None


def create_proxy_app(config: ProxyConfig, security: ServerSecurity = ServerSecurity(), *,
                     host: str | None = None) -> Guard:
    """The proxy as an ASGI app behind the shared HTTP layer (``host``: the bind address, for the Host check)."""
    upstream = Upstream(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            # The model id for /health from the start, briefly: a request resolves it again if this fails.
            await upstream.resolve(timeout_s=min(5.0, config.timeout_s))
        except ProxyError as exc:
            log.warning("upstream not resolved at start-up (requests will try again): %s", exc)
        try:
            yield
        finally:
            await upstream.aclose()

    app = make_app("textwm WM proxy", security, lifespan)
    app.state.upstream = upstream

    async def predict(request: Request):
        try:
            body = await read_json_body(request)
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        if "input" in body and set(body) != {"input"}:
            return error_response(request, 422, f"unknown field(s) beside input: {', '.join(sorted(set(body) - {'input'}))}",
                                  "invalid_request_error")
        try:
            wm = WMInput.model_validate(body.get("input", body))
        except ValidationError as exc:
            return error_response(request, 422, validation_message(exc), "invalid_request_error")
        try:
            answer = await _unless_client_leaves(request, upstream.generate(wm))
            if answer is None:     # the client went away: its upstream request was cancelled, nobody reads this
                return JSONResponse(status_code=499, content=None)
            return JSONResponse(answer)  # direct: skips FastAPI's jsonable_encoder pass
        except ProxyError as exc:
            log.warning("request failed (%d): %s", exc.status, exc)
            return error_response(request, exc.status, str(exc),
                                  "upstream_error" if exc.status >= 500 else "invalid_request_error")

    for path in PAYLOAD_PATHS:
        app.post(path)(predict)

    @app.get("/health")
    async def health():
        """The proxy's own state, never a call upstream (a probe must not wait on, nor load, the upstream): the
        model resolved so far and the upstream's last answer."""
        return {"status": "ok", "upstream": config.upstream, "model": upstream.model, "kind": upstream.kind,
                "upstream_last_status": upstream.last_status,
                "upstream_last_seen_s": None if upstream.last_seen is None else round(time.time() - upstream.last_seen, 1)}

    @app.get("/health/upstream")
    async def health_upstream():
        """A probe of the upstream (``GET /v1/models``, 3 s): 200 with its model, or 503 saying why not."""
        try:
            card = await upstream.describe(timeout_s=3.0)
        except ProxyError as exc:
            return JSONResponse(status_code=503, content={"status": "upstream_unreachable", "error": str(exc)[:300],
                                                          "upstream": config.upstream})
        return {"status": "ok", "upstream": config.upstream, "model": card["id"],
                "kind": upstream.kind or _OWNER_KINDS.get(str(card["owned_by"]), "vllm")}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return "\n".join(render_status_counts(app.state.guard.statuses, "textwm_proxy_responses_total",
                                               f'upstream="{config.upstream}"')) + "\n"

    return guard(app, security, host=host)
