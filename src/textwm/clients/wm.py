"""The world-model client the simulators use: the paper's payload to the WM proxy, an observation back.

Sync (:class:`WMClient`) and async (:class:`AsyncWMClient`) with the same rules as the OpenAI client:
one deadline per prediction (``timeout_s``) across its retries, retries after connection errors and
"busy" answers (429, 503) only, never after a read timeout. The reply is unwrapped into the observation
text (think blocks, tool_response tags and an ``OBSERVATION:`` label removed, JSON-wrapped and chat-shaped
replies opened); anything else
raises a :class:`WMError` subclass that the caller must handle — never an empty observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from textwm.clients.retry import CLIENT_KEEPALIVE_S, Deadline, RetryPolicy, retryable_transport
from textwm.data.text import strip_tags

#: Keys under which some AR world models wrap the observation (``{"observation": "..."}``).
WRAPPER_KEYS = ("observation", "next_observation", "obs", "output", "response", "result", "text", "content")


class WMError(RuntimeError):
    """The world model could not produce an observation."""


class WMUnavailable(WMError):
    """The proxy (or its upstream) is unreachable, timed out or kept failing."""


class WMBadResponse(WMError):
    """The proxy answered, but with an error status, garbage, or an empty observation."""


#: A label some world models put before the observation (``OBSERVATION: You move to the kitchen.``); the paper's
#: plugins strip it. Only with its colon, so an observation that starts with such a word is kept.
_LABEL_RE = re.compile(r"^(?:OBSERVATION|OBS|Response)\s*:\s*", re.IGNORECASE)


def _chat_text(value: Any) -> str | None:
    """The text of a chat-shaped JSON reply: ``[{"role": ..., "content": ...}]`` (its content, itself possibly a
    list of parts) or ``[{"type": "text", "text": ...}]``; None for any other value (a tool's JSON array stays)."""
    if not isinstance(value, list) or not value or not isinstance(value[0], dict):
        return None
    first = value[0]
    if "role" in first and isinstance(first.get("content"), str | list):
        content = first["content"]
        return content if isinstance(content, str) else _chat_text(content)
    parts = [x for x in value if isinstance(x, dict) and x.get("type") == "text" and isinstance(x.get("text"), str)]
    return parts[0]["text"] if parts else None


def unwrap_observation(text: str) -> str:
    """Observation text of a WM reply: tags and an ``OBSERVATION:`` label stripped, a JSON string, a one-key
    wrapper or a chat-shaped list (``[{"role": "assistant", "content": ...}]``, as Qwen3.5 world models answer)
    opened."""
    text = _LABEL_RE.sub("", strip_tags(text))
    for _ in range(3):  # nested wrappers: {"output": "{\"observation\": ...}"}
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            return text
        if isinstance(value, str):
            text = value.strip()
            continue
        if isinstance(value, dict):
            hits = [k for k in WRAPPER_KEYS if isinstance(value.get(k), str)]
            if len(hits) == 1 and len(value) <= 2:
                text = value[hits[0]].strip()
                continue
        chat = _chat_text(value)
        if chat is not None:
            text = _LABEL_RE.sub("", chat.strip())
            continue
        return text
    return text


@dataclass(frozen=True)
class WMResult:
    observation: str
    raw: str
    usage: dict[str, Any] = field(default_factory=dict)


def _payload(system_prompt: Any, state: Any, action: Any, max_tokens: int, temperature: float,
             num_diffusion_steps: int | None, top_p: float | None = None,
             response_template: list | None = None) -> dict:
    inp = {"system_prompt": system_prompt, "state": state, "action": action, "max_tokens": max_tokens,
           "temperature": temperature}
    if num_diffusion_steps is not None:
        inp["num_diffusion_steps"] = num_diffusion_steps
    if top_p is not None:
        inp["top_p"] = top_p
    if response_template is not None:
        inp["response_template"] = fit_template(response_template, max_tokens)
    return {"input": inp}


def fit_template(template: list, max_tokens: int) -> list:
    """``template`` with its slot sizes scaled down, each to at least 1, so that they fit ``max_tokens``."""
    sizes = [p["fill"] for p in template if isinstance(p, dict) and p.get("fill") is not None]
    total = sum(sizes)
    if total <= max_tokens:
        return template
    return [{"fill": max(1, p["fill"] * max_tokens // total)} if isinstance(p, dict) and p.get("fill") else p
            for p in template]


def _result(resp: httpx.Response) -> WMResult:
    try:
        data = resp.json()
    except ValueError:
        raise WMBadResponse(f"proxy answered {resp.status_code} with non-JSON: {resp.text[:200]}") from None
    if resp.status_code != 200:
        raise WMBadResponse(f"proxy answered {resp.status_code}: {data.get('error', data) if isinstance(data, dict) else data}")
    raw = data.get("generated_text") if isinstance(data, dict) else None
    if not isinstance(raw, str):
        raise WMBadResponse(f"proxy reply has no generated_text: {str(data)[:200]}")
    observation = unwrap_observation(raw)
    if not observation:
        raise WMBadResponse(f"empty observation (raw reply: {raw[:200]!r})")
    return WMResult(observation=observation, raw=raw, usage=data.get("usage") or {})


#: Statuses after which the client tries again: the proxy is busy. (502/504 mean the proxy already
#: retried its upstream, so they end the request at once.)
_RETRY_STATUS = frozenset({429, 503})


def _outcome(resp: httpx.Response) -> WMResult | str:
    """The result of an answer, or the text of a failure worth retrying; raises for a final failure."""
    if resp.status_code in _RETRY_STATUS:
        return f"HTTP {resp.status_code}: {resp.text[:200]}"
    if resp.status_code in (502, 504):
        raise WMUnavailable(f"proxy answered {resp.status_code}: {resp.text[:300]}")
    return _result(resp)


def _transport_failure(exc: httpx.TransportError) -> str:
    return f"{type(exc).__name__}: {exc}"


class _BaseWMClient:
    """What the sync and the async client share: defaults, the request body, the give-up error."""

    def __init__(self, endpoint: str, *, retry: RetryPolicy, max_tokens: int, temperature: float,
                 num_diffusion_steps: int | None, timeout_s: float, api_key: str | None, top_p: float | None = None):
        self.endpoint = endpoint
        self.retry = retry
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.defaults = {"max_tokens": max_tokens, "temperature": temperature, "num_diffusion_steps": num_diffusion_steps,
                         "top_p": top_p}

    def _body(self, system_prompt: Any, state: Any, action: Any, overrides: dict[str, Any]) -> dict:
        return _payload(system_prompt, state, action, **{**self.defaults, **overrides})

    def _exhausted(self, last: str, attempts: int) -> WMUnavailable:
        return WMUnavailable(f"world model at {self.endpoint} unavailable after {attempts} attempts: {last}")

    def _pause(self, deadline: Deadline, attempt: int, outcome: str | WMResult, exc: Exception | None) -> float:
        """The pause before the next attempt; raises WMUnavailable when there is none (no retry, no time)."""
        if exc is not None and not retryable_transport(exc):
            raise WMUnavailable(f"world model at {self.endpoint} gave no answer within {self.timeout_s:g} s: "
                                f"{outcome}") from None
        pause = deadline.pause(self.retry.delay(attempt)) if attempt <= self.retry.max_retries else None
        if pause is None:
            raise self._exhausted(str(outcome), attempt)
        return pause


class WMClient(_BaseWMClient):
    """Synchronous WM client (one connection pool per client; safe to share between threads).

    ``max_concurrent``: at most that many requests in flight at once from this client, the others wait their turn
    (the paper's ``WM_MAX_CONCURRENT``, for a shared endpoint); None: no cap."""

    def __init__(self, endpoint: str, *, timeout_s: float = 120.0, retry: RetryPolicy = RetryPolicy(),
                 max_tokens: int = 256, temperature: float = 0.0, num_diffusion_steps: int | None = None,
                 api_key: str | None = None, top_p: float | None = None, max_concurrent: int | None = None):
        super().__init__(endpoint, retry=retry, max_tokens=max_tokens, temperature=temperature,
                         num_diffusion_steps=num_diffusion_steps, timeout_s=timeout_s, api_key=api_key, top_p=top_p)
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent must be 1 or more (None: no cap), got {max_concurrent}")
        self._slots = threading.BoundedSemaphore(max_concurrent) if max_concurrent else contextlib.nullcontext()
        self._http = httpx.Client(headers=self.headers, limits=httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=CLIENT_KEEPALIVE_S))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def predict(self, system_prompt: Any, state: Any, action: Any, **overrides: Any) -> WMResult:
        """Next observation for (system prompt, state, action). Raises WMUnavailable / WMBadResponse."""
        body, deadline, attempt = self._body(system_prompt, state, action, overrides), Deadline(self.timeout_s), 0
        while True:
            attempt += 1
            failure = None
            try:
                with self._slots:
                    outcome = _outcome(self._http.post(self.endpoint, json=body, timeout=deadline.timeout(5.0)))
            except httpx.TransportError as exc:
                outcome, failure = _transport_failure(exc), exc
            if isinstance(outcome, WMResult):
                return outcome
            time.sleep(self._pause(deadline, attempt, outcome, failure))


class AsyncWMClient(_BaseWMClient):
    """Asynchronous WM client with the same behaviour as :class:`WMClient`."""

    def __init__(self, endpoint: str, *, timeout_s: float = 120.0, retry: RetryPolicy = RetryPolicy(),
                 max_tokens: int = 256, temperature: float = 0.0, num_diffusion_steps: int | None = None,
                 max_connections: int = 64, api_key: str | None = None, top_p: float | None = None):
        super().__init__(endpoint, retry=retry, max_tokens=max_tokens, temperature=temperature,
                         num_diffusion_steps=num_diffusion_steps, timeout_s=timeout_s, api_key=api_key, top_p=top_p)
        self._http = httpx.AsyncClient(headers=self.headers, limits=httpx.Limits(
            max_connections=max_connections, keepalive_expiry=CLIENT_KEEPALIVE_S))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncWMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def predict(self, system_prompt: Any, state: Any, action: Any, **overrides: Any) -> WMResult:
        body, deadline, attempt = self._body(system_prompt, state, action, overrides), Deadline(self.timeout_s), 0
        while True:
            attempt += 1
            failure = None
            try:
                outcome = _outcome(await self._http.post(self.endpoint, json=body, timeout=deadline.timeout(5.0)))
            except httpx.TransportError as exc:
                outcome, failure = _transport_failure(exc), exc
            if isinstance(outcome, WMResult):
                return outcome
            await asyncio.sleep(self._pause(deadline, attempt, outcome, failure))
