"""The native OpenAI-compatible server: an app factory over an :class:`~textwm.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, ``GET /metrics``. Every
request passes the shared HTTP layer first (:mod:`textwm.web`: API key, Host, JSON content type, body
size, request id). Errors are one JSON shape: 400 malformed JSON or an unservable request, 401 no or
wrong API key, 404 unknown model, 413 body too large, 415 not JSON, 422 schema violations (unknown
fields named), 503 queue full, 500 decoder failure or any unexpected fault (with the request id; the
server keeps running). Tokenising and templating run off the event loop, so ``/health`` answers while
a request is being prepared.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from textwm.serving.engine import DecodeFailed, Engine, QueueFull, RequestError, UnknownModel
from textwm.serving.protocol import ChatCompletionRequest, ModelCard, ModelList
from textwm.web import (
    BadBody,
    Guard,
    ServerSecurity,
    error_response,
    guard,
    make_app,
    read_json_body,
    validation_message,
)

log = logging.getLogger(__name__)


def create_app(engine: Engine, security: ServerSecurity = ServerSecurity(), *, host: str | None = None) -> Guard:
    """The server as an ASGI app; starting it starts the engine's worker thread, stopping it stops it.

    ``host``: the bind address (loopback: Host headers must name loopback; None: not checked).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        log.info("serving %s (%s) with batches of up to %d rows", engine.config.served_model_name, engine.family,
                 engine.config.max_batch_size)
        try:
            yield
        finally:
            engine.stop()

    app = make_app("textwm world-model server", security, lifespan)
    metrics = engine.metrics

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        metrics.requests += 1
        try:
            chat = ChatCompletionRequest.model_validate(await read_json_body(request))
        except BadBody as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        except ValidationError as exc:
            return error_response(request, 422, validation_message(exc), "invalid_request_error")
        try:
            response = await engine.complete(chat)
        except UnknownModel as exc:
            return error_response(request, 404, str(exc), "model_not_found")
        except RequestError as exc:
            return error_response(request, 400, str(exc), "invalid_request_error")
        except QueueFull as exc:
            return error_response(request, 503, str(exc), "server_busy")
        except DecodeFailed as exc:
            return error_response(request, 500, f"decoding failed: {exc}", "server_error")
        return JSONResponse(response.model_dump())

    @app.get("/v1/models")
    async def models() -> dict:
        card = ModelCard(id=engine.config.served_model_name, family=engine.family,
                         max_model_len=engine.config.max_model_len)
        return ModelList(data=[card]).model_dump()

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": engine.config.served_model_name, "family": engine.family,
                "queue_depth": engine.queue_depth}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> str:
        return metrics.render(queue_depth=engine.queue_depth, model=engine.config.served_model_name,
                              statuses=app.state.guard.statuses)

    return guard(app, security, host=host)
