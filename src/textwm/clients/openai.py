"""A small async client for OpenAI-compatible ``/v1/chat/completions`` endpoints.

Used to generate predictions from any served model (vLLM, lmdeploy, our native server, a hosted
API). Transient failures — connection errors, timeouts, HTTP 408/429/5xx — are retried with
exponential backoff; anything else fails at once. A request that still fails raises
:class:`ChatRequestError`; batch helpers turn it into an ``ERROR: ...`` prediction that the
scorer counts, so one bad row never stops a long evaluation and never passes as a prediction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from tqdm.auto import tqdm

from textwm.clients.retry import (
    CLIENT_KEEPALIVE_S,
    TRANSIENT_STATUS,
    Deadline,
    RetryPolicy,
    retryable_transport,
)

log = logging.getLogger(__name__)



class ChatRequestError(RuntimeError):
    """A chat request failed for good (after retries, or a non-transient error)."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1, transport: str | None = None):
        super().__init__(message)
        #: HTTP status of the last answer (None: no answer, see ``transport``).
        self.status = status
        self.attempts = attempts
        #: Name of the transport error when there was no answer (``ConnectError``, ``ReadTimeout``, ...).
        self.transport = transport

    @property
    def timed_out(self) -> bool:
        return bool(self.transport) and "Timeout" in self.transport


def chat_completions_url(api_url: str) -> str:
    """Accept a full ``.../v1/chat/completions`` URL, a ``.../v1`` base, or a bare server URL."""
    url = api_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


@dataclass(frozen=True)
class ChatResult:
    text: str
    finish_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)


class ChatClient:
    """Async chat-completions client with a connection pool and retries within one deadline per request.

    Use as ``async with ChatClient(url, model=...) as client: await client.complete(messages)``.
    ``timeout_s`` bounds each request, retries included (:mod:`textwm.clients.retry`).
    """

    def __init__(self, api_url: str, *, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 120.0, retry: RetryPolicy = RetryPolicy(), max_connections: int = 64):
        self.url = chat_completions_url(api_url)
        self.model = model
        self.retry = retry
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                                keepalive_expiry=CLIENT_KEEPALIVE_S))

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> ChatResult:
        """One chat completion. ``params`` go into the request body (max_tokens, temperature, ...).

        Raises:
            ChatRequestError: non-transient HTTP error, malformed response, or retries exhausted.
        """
        body: dict[str, Any] = {"messages": list(messages), **params}
        if self.model is not None:
            body.setdefault("model", self.model)
        deadline = Deadline(self.timeout_s)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = await self._http.post(self.url, json=body, timeout=deadline.timeout())
            except httpx.TransportError as exc:  # connect refused, reset, timeout
                error, status, transport = f"{type(exc).__name__}: {exc or 'no detail'}", None, type(exc).__name__
                if not retryable_transport(exc):
                    raise ChatRequestError(f"{error} (no answer within {self.timeout_s:g} s)", attempts=attempt,
                                           transport=transport) from None
            else:
                transport = None
                if resp.status_code == 200:
                    return _parse_choice(resp, attempt)
                error, status = f"HTTP {resp.status_code}: {error_text(resp)}", resp.status_code
                if status not in TRANSIENT_STATUS:
                    raise ChatRequestError(error, status=status, attempts=attempt)
            pause = deadline.pause(self.retry.delay(attempt)) if attempt <= self.retry.max_retries else None
            if pause is None:
                raise ChatRequestError(f"{error} (after {attempt} attempts)", status=status, attempts=attempt,
                                       transport=transport)
            await asyncio.sleep(pause)


def error_text(resp: httpx.Response) -> str:
    """The message of an error answer: ``error.message`` of an OpenAI-style body, else the text (bounded)."""
    try:
        err = resp.json()["error"]
        return str(err["message"] if isinstance(err, dict) else err)[:500]
    except (ValueError, KeyError, TypeError):
        return resp.text[:300]


def _parse_choice(resp: httpx.Response, attempt: int) -> ChatResult:
    try:
        data = resp.json()
        choice = data["choices"][0]
        text = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ChatRequestError(f"malformed response ({type(exc).__name__}: {exc}): {resp.text[:300]}",
                               status=resp.status_code, attempts=attempt) from None
    if text is None:   # OpenAI's message content is null when it holds no text (lmdeploy's empty completions)
        text = ""
    if not isinstance(text, str):
        raise ChatRequestError(f"response content is {type(text).__name__}, not text: {resp.text[:300]}",
                               status=resp.status_code, attempts=attempt)
    return ChatResult(text=text, finish_reason=choice.get("finish_reason"), usage=data.get("usage") or {})


async def complete_all(client: ChatClient, prompts: Sequence[Sequence[dict[str, str]]], *, concurrency: int,
                       desc: str = "generating", **params: Any) -> list[str]:
    """Complete every prompt with at most ``concurrency`` requests in flight.

    Returns one text per prompt, in order; a prompt whose request failed for good yields
    ``"ERROR: <reason>"`` (and is logged), which the scorer drops and counts.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)
    results: list[str] = [""] * len(prompts)
    failures = 0
    bar = tqdm(total=len(prompts), desc=desc, unit="req", mininterval=1.0)

    async def one(i: int) -> None:
        nonlocal failures
        async with gate:
            try:
                results[i] = (await client.complete(prompts[i], **params)).text
            except ChatRequestError as exc:
                failures += 1
                results[i] = f"ERROR: {exc}"
                log.warning("request %d failed: %s", i, exc)
            bar.update(1)

    await asyncio.gather(*(one(i) for i in range(len(prompts))))
    bar.close()
    if failures:
        log.warning("%d of %d requests failed; written as ERROR rows", failures, len(prompts))
    return results


def models_url(api_url: str) -> str:
    """``.../v1/models`` for any URL form :func:`chat_completions_url` accepts."""
    return chat_completions_url(api_url)[: -len("/chat/completions")] + "/models"


async def resolve_model_id(api_url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> str:
    """The first model id an OpenAI-compatible server lists under ``/v1/models``.

    Raises:
        ChatRequestError: the server is unreachable or lists no model.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = models_url(api_url)
    try:
        async with httpx.AsyncClient(headers=headers, timeout=timeout_s) as http:
            resp = await http.get(url)
    except httpx.TransportError as exc:
        raise ChatRequestError(f"cannot list models at {url}: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise ChatRequestError(f"cannot list models at {url}: HTTP {resp.status_code}: {resp.text[:200]}",
                               status=resp.status_code)
    try:
        models = resp.json()["data"]
        return str(models[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ChatRequestError(f"{url} lists no model: {resp.text[:200]}", status=resp.status_code) from None
