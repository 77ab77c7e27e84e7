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
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
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
    finished_before_client_left,
    guard,
    make_app,
    read_json_body,
    validation_message,
)

log = logging.getLogger(__name__)

#: Status recorded for a request whose client went away before its response (nginx's convention; never seen).
CLIENT_CLOSED = 499


class _Format:
    """A response's ids and its stream chunks as plain dicts (built per delta: no pydantic model per token).

    A chunk has the fields and order of the protocol's chunk models (``ChatCompletionChunk`` /
    ``CompletionChunk``); ``usage`` is null in every chunk with include_usage (OpenAI's rule), absent without.
    """

    object = ""
    prefix = ""

    def __init__(self, model: str, prepared: Prepared, include_usage: bool):
        self.model, self.rows, self.include_usage = model, len(prepared.prompts), include_usage
        self.id, self.created = f"{self.prefix}-{uuid.uuid4().hex[:24]}", int(time.time())

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                 "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _choice(self, index: int, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def chunks(self, deltas: list[TextDelta]) -> list[dict[str, Any]]:
        """The chunks of a batch of deltas: one with the text (if any), then one with the finish reason."""
        out = []
        for d in deltas:
            if d.text:
                out.append(self._chunk([self._choice(d.index, d.text, None)]))
            if d.finish_reason is not None:
                out.append(self._chunk([self._choice(d.index, None, d.finish_reason)]))
        return out

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        return {**self._chunk([]), "usage": usage.model_dump()}


class _ChatFormat(_Format):
    """Chat completions' response and chunks (``chat.completion`` / ``chat.completion.chunk``)."""

    object, prefix = "chat.completion.chunk", "chatcmpl"

    def _choice(self, index: int, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        delta = {} if text is None else {"content": text}
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def opening(self) -> list[dict[str, Any]]:
        """A ``{"role": "assistant", "content": ""}`` delta for every choice (what OpenAI and vLLM send first)."""
        return [self._chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}]) for i in range(self.rows)]

    def response(self, texts: list[str], reasons: list[str], usage: Usage) -> Any:
        choices = [ChatChoice(index=i, message=ChatChoiceMessage(content=t), finish_reason=r)
                   for i, (t, r) in enumerate(zip(texts, reasons))]
        return ChatCompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices,
                                      usage=usage)


class _CompletionFormat(_Format):
    """Legacy completions' response and chunks (``text_completion``); with echo, a choice's prompt comes first."""

    object, prefix = "text_completion", "cmpl"

    def __init__(self, model: str, prepared: Prepared, include_usage: bool):
        super().__init__(model, prepared, include_usage)
        self.echo = prepared.echo

    def _choice(self, index: int, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish_reason}

    def opening(self) -> list[dict[str, Any]]:
        return [self._chunk([self._choice(i, t, None)]) for i, t in enumerate(self.echo or []) if t]

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


async def _collect(request: Request, submission: Submission) -> tuple[list[str], list[str]] | None:
    """Every choice's whole text and finish reason; None (rows cancelled) if the client goes away first.

    The request's coroutine wakes once, when all its rows are done (:meth:`Submission.texts`)."""
    work = asyncio.ensure_future(submission.texts())
    if not await finished_before_client_left(request, work):
        submission.close()
        return None  # the client went away: nobody reads a response
    texts = work.result()  # the engine's error, if its rows failed
    return texts, [r.finish_reason or "length" for r in submission.rows]


def create_app(engine: Engine, security: ServerSecurity = ServerSecurity(), *, host: str | None = None) -> Guard:
    """The server as an ASGI app; starting it starts the engine's worker thread, stopping it stops it.

    ``host``: the bind address (loopback: Host headers must name loopback; None: not checked).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        log.info("serving %s (%s) with %s of up to %d rows", engine.config.served_model_name, engine.family,
                 engine.scheduler_name, engine.config.max_batch_size)
        try:
            yield
        finally:
            engine.stop()

    app = make_app("textwm world-model server", security, lifespan)
    metrics = engine.metrics
    model = engine.config.served_model_name

    async def stream(request: Request, body: SamplingRequest, submission: Submission, fmt: Any) -> AsyncIterator[str]:
        """The SSE events of one request; an engine error after the start is an error event then [DONE].

        The chunks of all the deltas that came since the last write go out as one body part (one send
        through the ASGI stack per step and request, not one per chunk)."""
        rid = request.state.request_id
        try:
            opening = "".join(sse(chunk) for chunk in fmt.opening())
            if opening:
                yield opening
            async for deltas in submission.delta_batches():
                events = "".join(sse(chunk) for chunk in fmt.chunks(deltas))
                if events:
                    yield events
            if body.include_usage:
                yield sse(fmt.usage_chunk(_usage(submission)))
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
            if prepared.layouts is not None:
                return await serve_anchored(request, prepared, format_)
            submission = engine.submit(prepared)
        except (UnknownModel, RequestError, QueueFull, DecodeFailed) as exc:
            return error_response(request, *_error_status(exc))
        fmt = format_(model, prepared, body.include_usage)
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

    async def serve_anchored(request: Request, prepared: Prepared, format_: type) -> Any:
        """A request with a ``response_template``: every row's filled template, returned whole."""
        try:
            answers = await engine.answer_anchored(prepared)
        except (DecodeFailed, RowsRefused) as exc:
            metrics.failed_requests += isinstance(exc, DecodeFailed)
            return error_response(request, *_error_status(exc))
        completion = sum(a.completion_tokens for a in answers)
        usage = Usage(prompt_tokens=prepared.prompt_tokens, completion_tokens=completion,
                      total_tokens=prepared.prompt_tokens + completion,
                      decoder_forwards=sum(a.num_forwards for a in answers))
        fmt = format_(model, prepared, False)
        return JSONResponse(fmt.response([a.text for a in answers], [a.finish_reason for a in answers],
                                         usage).model_dump())

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
    async def health(request: Request) -> Any:
        if engine.failure is not None:   # an engine process that exited: a supervisor should restart this server
            return error_response(request, 503, engine.failure, "engine_failed")
        return {"status": "ok", "model": model, "family": engine.family, "queue_depth": engine.queue_depth}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> str:
        return metrics.render(queue_depth=engine.queue_depth, model=model, statuses=app.state.guard.statuses)

    return guard(app, security, host=host)
