"""The native OpenAI-compatible server: an app factory over an :class:`~textwm.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (legacy, no chat template),
``GET /v1/models``, ``GET /health``, ``GET /metrics``. Every request passes the shared HTTP layer first
(:mod:`textwm.web`: API key, Host, JSON content type, body size, request id). Errors are one JSON
shape: 400 malformed JSON or an unservable request, 401 no or wrong API key, 404 unknown model, 413
body too large, 415 not JSON, 422 schema violations (unknown fields named), 503 queue full, 500
decoder failure or any unexpected fault (with the request id; the server keeps running). Tokenising
and templating run off the event loop, so ``/health`` answers while a request is being prepared.

``stream: true`` answers server-sent events in OpenAI's format (:mod:`textwm.serving.protocol`). Every
error found before the request is queued keeps its JSON response and status; one after the stream
started (the decoder failed) is an event ``data: {"error": {...}}`` then ``data: [DONE]``, as vLLM's
and lmdeploy's servers send it, and is counted in ``/metrics`` (``textwm_stream_errors_total``).
A client that goes away has its rows cancelled (a stream's generator is closed; a plain request
watches for the disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import ValidationError

from textwm.serving.engine import (
    DecodeFailed,
    Engine,
    Prepared,
    QueueFull,
    RequestError,
    RowsRefused,
    UnknownModel,
)
from textwm.serving.protocol import (
    ChatChoice,
    ChatChoiceMessage,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    SamplingRequest,
    Usage,
)
from textwm.serving.streaming import DONE_EVENT, Submission, TextDelta, sse
from textwm.web import (
    BadBody,
    Guard,
    ServerSecurity,
    error_body,
    error_response,
    guard,
    make_app,
    read_json_body,
    validation_message,
)

log = logging.getLogger(__name__)

#: Status recorded for a request whose client went away before its response (nginx's convention; never seen).
CLIENT_CLOSED = 499


class _ChatFormat:
    """Chat completions' response and chunks (``chat.completion`` / ``chat.completion.chunk``)."""

    def __init__(self, model: str, prepared: Prepared):
        self.model, self.rows = model, len(prepared.prompts)
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices, usage=usage)

    def opening(self) -> list[Any]:
        """A ``{"role": "assistant", "content": ""}`` delta for every choice (what OpenAI and vLLM send first)."""
        return [self._chunk([ChatChunkChoice(index=i, delta={"role": "assistant", "content": ""})])
                for i in range(self.rows)]

    def chunk(self, delta: TextDelta) -> list[Any]:
        out = [self._chunk([ChatChunkChoice(index=delta.index, delta={"content": delta.text})])] if delta.text else []
        if delta.finish_reason is not None:
            out.append(self._chunk([ChatChunkChoice(index=delta.index, delta={}, finish_reason=delta.finish_reason)]))
        return out

    def usage_chunk(self, usage: Usage) -> Any:
        return self._chunk([], usage)

    def response(self, texts: list[str], reasons: list[str], usage: Usage) -> Any:
        choices = [ChatChoice(index=i, message=ChatChoiceMessage(content=t), finish_reason=r)
                   for i, (t, r) in enumerate(zip(texts, reasons))]
        return ChatCompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices,
                                      usage=usage)


class _CompletionFormat:
    """Legacy completions' response and chunks (``text_completion``); with echo, a choice's prompt comes first."""

    def __init__(self, model: str, prepared: Prepared):
        self.model, self.echo = model, prepared.echo
        self.id, self.created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())

    def _chunk(self, choices: list[CompletionChunkChoice], usage: Usage | None = None) -> CompletionChunk:
        return CompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices, usage=usage)

    def opening(self) -> list[Any]:
        return [self._chunk([CompletionChunkChoice(index=i, text=t)]) for i, t in enumerate(self.echo or []) if t]

    def chunk(self, delta: TextDelta) -> list[Any]:
        out = [self._chunk([CompletionChunkChoice(index=delta.index, text=delta.text)])] if delta.text else []
        if delta.finish_reason is not None:
            out.append(self._chunk([CompletionChunkChoice(index=delta.index, text="",
                                                          finish_reason=delta.finish_reason)]))
        return out

    def usage_chunk(self, usage: Usage) -> Any:
        return self._chunk([], usage)

    def response(self, texts: list[str], reasons: list[str], usage: Usage) -> Any:
        echo = self.echo or [""] * len(texts)
        choices = [CompletionChoice(index=i, text=e + t, finish_reason=r)
                   for i, (e, t, r) in enumerate(zip(echo, texts, reasons))]
        return CompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices, usage=usage)


def _usage(submission: Submission) -> Usage:
    completion = submission.completion_tokens()
    return Usage(prompt_tokens=submission.prompt_tokens, completion_tokens=completion,
                 total_tokens=submission.prompt_tokens + completion, decoder_forwards=submission.decoder_forwards())


def _error_status(exc: BaseException) -> tuple[int, str, str]:
    """HTTP status, message and error type of an engine exception."""
    if isinstance(exc, UnknownModel):
        return 404, str(exc), "model_not_found"
    if isinstance(exc, (RequestError, RowsRefused)):
        return 400, str(exc), "invalid_request_error"
    if isinstance(exc, QueueFull):
        return 503, str(exc), "server_busy"
    return 500, f"decoding failed: {exc}", "server_error"


def _dump(chunk: Any, include_usage: bool) -> dict[str, Any]:
    """A chunk as JSON data: ``usage`` is null in every chunk with include_usage (OpenAI's rule), absent without."""
    data = chunk.model_dump()
    if not include_usage:
        data.pop("usage")
    return data


async def _until_disconnect(request: Request) -> None:
    """Return when the client closes the connection (the body is read already: the next message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _collect(request: Request, submission: Submission) -> tuple[list[str], list[str]] | None:
    """Every choice's whole text and finish reason; None (rows cancelled) if the client goes away first."""
    texts = [""] * len(submission.rows)

    async def gather() -> None:
        async for d in submission.deltas():
            texts[d.index] += d.text

    work = asyncio.ensure_future(gather())
    gone = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()
            submission.close()
    if not work.done() or work.cancelled():
        return None  # the client went away: nobody reads a response
    work.result()  # the engine's error, if its rows failed
    return texts, [r.finish_reason or "length" for r in submission.rows]


def create_app(engine: Engine, security: ServerSecurity = ServerSecurity(), *, host: str | None = None) -> Guard:
    """The server as an ASGI app; starting it starts the engine's worker thread, stopping it stops it.

    ``host``: the bind address (loopback: Host headers must name loopback; None: not checked).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        log.info("serving %s (%s) with %s of up to %d rows", engine.config.served_model_name, engine.family,
                 type(engine.scheduler).__name__, engine.config.max_batch_size)
        try:
            yield
        finally:
            engine.stop()

    app = make_app("textwm world-model server", security, lifespan)
    metrics = engine.metrics
    model = engine.config.served_model_name

    async def stream(request: Request, body: SamplingRequest, submission: Submission, fmt: Any) -> AsyncIterator[str]:
        """The SSE events of one request; an engine error after the start is an error event then [DONE]."""
        rid = request.state.request_id
        try:
            for chunk in fmt.opening():
                yield sse(_dump(chunk, body.include_usage))
            async for delta in submission.deltas():
                for chunk in fmt.chunk(delta):
                    yield sse(_dump(chunk, body.include_usage))
            if body.include_usage:
                yield sse(fmt.usage_chunk(_usage(submission)).model_dump())
        except (DecodeFailed, RowsRefused) as exc:
            metrics.record_stream_error()
            status, message, kind = _error_status(exc)
            log.warning("stream of request %s failed after it started: %s", rid, exc)
            yield sse(error_body(message, kind, status, rid))
        except Exception as exc:  # the status is sent already: the client gets an error event
            metrics.record_stream_error()
            log.exception("stream of request %s failed after it started", rid)
            yield sse(error_body(f"internal server error (request id {rid}; the server log has the details): "
                                 f"{type(exc).__name__}", "server_error", 500, rid))
        finally:
            submission.close()
        yield DONE_EVENT

    async def serve(request: Request, schema: type[SamplingRequest],
                    prepare: Callable[[Any], Awaitable[Prepared]], format_: type) -> Any:
        metrics.requests += 1
        try:
            body = schema.model_validate(await read_json_body(request))
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        except ValidationError as exc:
            return error_response(request, 422, validation_message(exc), "invalid_request_error")
        try:
            prepared = await prepare(body)
            submission = engine.submit(prepared)
        except (UnknownModel, RequestError, QueueFull) as exc:
            return error_response(request, *_error_status(exc))
        fmt = format_(model, prepared)
        if body.stream:
            return StreamingResponse(stream(request, body, submission, fmt), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            collected = await _collect(request, submission)
        except (DecodeFailed, RowsRefused) as exc:
            return error_response(request, *_error_status(exc))
        if collected is None:
            return error_response(request, CLIENT_CLOSED, "the client closed the connection", "client_closed")
        return JSONResponse(fmt.response(*collected, _usage(submission)).model_dump())

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await serve(request, ChatCompletionRequest, engine.prepare_chat, _ChatFormat)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await serve(request, CompletionRequest, engine.prepare_completion, _CompletionFormat)

    @app.get("/v1/models")
    async def models() -> dict:
        card = ModelCard(id=model, family=engine.family, max_model_len=engine.config.max_model_len)
        return ModelList(data=[card]).model_dump()

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": model, "family": engine.family, "queue_depth": engine.queue_depth}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> str:
        return metrics.render(queue_depth=engine.queue_depth, model=model, statuses=app.state.guard.statuses)

    return guard(app, security, host=host)
