"""The native OpenAI-compatible server: an app factory over an :class:`~textwm.serving.engine.Engine`.

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, ``GET /metrics``.
Errors are OpenAI-style JSON: 400 malformed JSON or an unservable request, 404 unknown model,
422 schema violations, 503 queue full, 500 decoder failure (the server keeps running).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from textwm.serving.engine import DecodeFailed, Engine, QueueFull, RequestError, UnknownModel
from textwm.serving.protocol import ChatCompletionRequest, ModelCard, ModelList, error_body

log = logging.getLogger(__name__)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts)


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI app; starting it starts the engine's worker thread, stopping it stops it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        log.info("serving %s (%s) with batches of up to %d rows", engine.config.served_model_name, engine.family,
                 engine.config.max_batch_size)
        try:
            yield
        finally:
            engine.stop()

    app = FastAPI(title="textwm world-model server", lifespan=lifespan)
    metrics = engine.metrics

    def error(status: int, message: str, kind: str) -> JSONResponse:
        metrics.count_error(status)
        return JSONResponse(status_code=status, content=error_body(message, kind, status))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        metrics.requests += 1
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(400, f"malformed JSON body: {exc}", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object", "invalid_request_error")
        try:
            chat = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            return error(422, _validation_message(exc), "invalid_request_error")
        try:
            response = await engine.complete(chat)
        except UnknownModel as exc:
            return error(404, str(exc), "model_not_found")
        except RequestError as exc:
            return error(400, str(exc), "invalid_request_error")
        except QueueFull as exc:
            metrics.count_error(503)
            return JSONResponse(status_code=503, content=error_body(str(exc), "server_busy", 503),
                                headers={"Retry-After": "1"})
        except DecodeFailed as exc:
            return error(500, f"decoding failed: {exc}", "server_error")
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
        return metrics.render(queue_depth=engine.queue_depth, model=engine.config.served_model_name)

    return app
