"""The serving engine: a bounded request queue feeding the batched decoder on one worker thread.

Requests that share decoding settings (``max_tokens`` aside: rows carry their own length) are
batched together, up to ``max_batch_size`` rows, waiting at most ``batch_wait_ms`` for company.
A full queue rejects at once (:class:`QueueFull`, HTTP 503); a decoder exception fails the
requests of that batch (:class:`DecodeFailed`, HTTP 500) and the engine carries on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from textwm.generation.base import Generation
from textwm.generation.decoders import make_decoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import LoadedModel
from textwm.serving.metrics import ServerMetrics
from textwm.serving.protocol import (
    ChatChoice,
    ChatChoiceMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    Usage,
)
from textwm.serving.templates import TemplateError, TemplateSandbox, check_template_kwargs

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """The request cannot be served as asked (HTTP 400)."""


class UnknownModel(LookupError):
    """The request names a model this server does not serve (HTTP 404)."""


class QueueFull(RuntimeError):
    """The request queue is at capacity (HTTP 503)."""


class DecodeFailed(RuntimeError):
    """The decoder raised while serving this request's batch (HTTP 500)."""


#: A prompt of more characters than this many per token of max_model_len is refused before tokenising.
MAX_CHARS_PER_TOKEN = 16
#: SDAR settings a request may override under generate.py rules but not under lmdeploy's (per server there).
SERVER_DIFFUSION_FIELDS = ("denoising_steps", "block_length", "confidence_threshold", "remasking_strategy")


@dataclass(frozen=True)
class EngineConfig:
    served_model_name: str
    defaults: DecodeSettings = DecodeSettings(gen_length=256)
    max_batch_size: int = 32
    max_queue: int = 256
    batch_wait_ms: float = 5.0
    #: Prompt + max_tokens must fit in this many tokens.
    max_model_len: int = 8192
    #: Accept a ``chat_template`` in ``chat_template_kwargs`` (rendered in a sandboxed process with limits).
    allow_client_chat_template: bool = False


@dataclass
class _Work:
    prompts: list[list[int]]          # n copies of the prompt
    gen_length: int
    settings: DecodeSettings
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)

    @property
    def batch_key(self) -> DecodeSettings:
        return dataclasses.replace(self.settings, gen_length=1)


def _stop_at(text: str, stops: list[str]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class Engine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.loaded = loaded
        self.config = config
        self.tokenizer = loaded.tokenizer
        self.decoder = make_decoder(loaded.model, loaded.spec, pad_token_id=loaded.tokenizer.pad_token_id)
        self.family = loaded.spec.family
        self.metrics = ServerMetrics()
        self._queue: queue.Queue[_Work] = queue.Queue(maxsize=config.max_queue)
        self._held: deque[_Work] = deque()  # taken from the queue but not batchable with the last batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._templates: TemplateSandbox | None = None
        self._told_overrides_ignored = False
        if self.family == "sdar":
            loaded.spec.require_diffusion(config.defaults.block_length, rules=config.defaults.sdar_rules)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()  # an engine stopped by one app's shutdown can serve the next
        self._thread = threading.Thread(target=self._run, name="textwm-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._templates is not None:
            self._templates.close()

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize() + len(self._held)

    # --- requests --------------------------------------------------------------------------------

    def settings_for(self, request: ChatCompletionRequest) -> tuple[DecodeSettings, int]:
        """Decode settings of a request (its fields over the server defaults) and its max_tokens."""
        d = self.config.defaults
        max_tokens = request.max_completion_tokens or request.max_tokens or d.gen_length
        overrides: dict[str, Any] = {
            "temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
            "top_k": None if request.top_k is None else max(request.top_k, 0),
            "repetition_penalty": request.repetition_penalty,
            "denoising_steps": request.num_diffusion_steps, "block_length": request.block_length,
            "confidence_threshold": request.confidence_threshold, "remasking_strategy": request.remasking_strategy,
            "window_size": request.window_size, "entropy_threshold": request.entropy_threshold,
            "position_penalty": request.position_penalty,
        }
        if self.family == "sdar" and d.sdar_rules == "lmdeploy":
            self._drop_diffusion_overrides(overrides)
        try:
            settings = dataclasses.replace(d, gen_length=max_tokens,
                                           **{k: v for k, v in overrides.items() if v is not None})
            if self.family == "sdar":
                self.loaded.spec.require_diffusion(settings.block_length, rules=settings.sdar_rules)
        except ValueError as exc:  # CheckpointError is a ValueError too
            raise RequestError(str(exc)) from None
        return settings, max_tokens

    def _drop_diffusion_overrides(self, overrides: dict[str, Any]) -> None:
        """lmdeploy's diffusion settings are per server: a request's are ignored (the paper's plugins send
        ``num_diffusion_steps``, which lmdeploy never read), announced once per server."""
        sent = [k for k in SERVER_DIFFUSION_FIELDS if overrides.pop(k) is not None]
        if sent and not self._told_overrides_ignored:
            self._told_overrides_ignored = True
            log.warning("sdar_rules=lmdeploy: requests' %s are ignored, as lmdeploy ignores them (its diffusion "
                        "settings are per server); this is said once", ", ".join(sent))

    def encode(self, request: ChatCompletionRequest) -> list[int]:
        """The prompt's token ids (CPU work: called off the event loop). RequestError for a bad template use."""
        messages = [m.model_dump() for m in request.messages]
        chars = sum(len(m["content"]) for m in messages)
        if chars > self.config.max_model_len * MAX_CHARS_PER_TOKEN:
            raise RequestError(f"messages of {chars} characters cannot fit the server's max_model_len "
                               f"{self.config.max_model_len} tokens")
        try:
            variables = check_template_kwargs(dict(request.chat_template_kwargs or {}),
                                              allow_template=self.config.allow_client_chat_template)
            template = (request.chat_template_kwargs or {}).get("chat_template")
            if template is not None:
                text = self._sandbox().render(template, messages, variables)
            else:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                          **variables)
        except TemplateError as exc:
            raise RequestError(str(exc)) from None
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _sandbox(self) -> TemplateSandbox:
        if self._templates is None:
            self._templates = TemplateSandbox()
        return self._templates

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletionResponse:
        """Serve one chat completion (raises the exceptions above for the HTTP layer to map)."""
        if request.model is not None and request.model != self.config.served_model_name:
            raise UnknownModel(f"model {request.model!r} is not served here; this server serves "
                               f"{self.config.served_model_name!r} (see /v1/models)")
        settings, max_tokens = self.settings_for(request)
        prompt = await asyncio.to_thread(self.encode, request)  # tokenising and templating: off the event loop
        if len(prompt) + max_tokens > self.config.max_model_len:
            raise RequestError(f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds the server's "
                               f"max_model_len {self.config.max_model_len}")
        loop = asyncio.get_running_loop()
        work = _Work(prompts=[prompt] * request.n, gen_length=max_tokens, settings=settings, loop=loop,
                     future=loop.create_future())
        try:
            self._queue.put_nowait(work)
        except queue.Full:
            raise QueueFull(f"request queue is full ({self.config.max_queue} waiting); retry later") from None
        generations: list[Generation] = await work.future
        return self._response(request, prompt, generations, max_tokens)

    def _response(self, request: ChatCompletionRequest, prompt: list[int], generations: list[Generation],
                  max_tokens: int) -> ChatCompletionResponse:
        stops = request.stop_strings()
        choices = []
        for i, g in enumerate(generations):
            if len(g.token_ids) > max_tokens:  # block decoders fill whole blocks: max_tokens is an exact cap
                g = dataclasses.replace(g, token_ids=g.token_ids[:max_tokens], finish_reason="length")
                generations[i] = g
            text = self.tokenizer.decode(g.token_ids, skip_special_tokens=True)
            text, hit = _stop_at(text, stops)
            reason = "stop" if hit or g.finish_reason == "stop" else "length"
            choices.append(ChatChoice(index=i, message=ChatChoiceMessage(content=text), finish_reason=reason))
        completion = sum(len(g.token_ids) for g in generations)
        return ChatCompletionResponse(
            model=self.config.served_model_name, choices=choices,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=completion, total_tokens=len(prompt) + completion,
                        decoder_forwards=max((g.num_forwards for g in generations), default=0)))

    # --- the worker thread -----------------------------------------------------------------------

    def _next(self, timeout: float) -> _Work | None:
        if self._held:
            return self._held.popleft()
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _collect(self, first: _Work) -> list[_Work]:
        """``first`` plus queued work with the same settings, up to max_batch_size rows."""
        batch, rows = [first], len(first.prompts)
        deadline = time.perf_counter() + self.config.batch_wait_ms / 1000
        skipped: list[_Work] = []
        while rows < self.config.max_batch_size:
            remaining = deadline - time.perf_counter()
            try:
                work = self._queue.get(timeout=max(remaining, 0)) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if work.batch_key == first.batch_key and rows + len(work.prompts) <= self.config.max_batch_size:
                batch.append(work)
                rows += len(work.prompts)
            else:
                skipped.append(work)
        self._held.extend(skipped)
        return batch

    def _run(self) -> None:
        while not self._stop.is_set():
            first = self._next(timeout=0.2)
            if first is None:
                continue
            batch = self._collect(first)
            prompts = [p for w in batch for p in w.prompts]
            lengths = [w.gen_length for w in batch for _ in w.prompts]
            settings = dataclasses.replace(first.settings, gen_length=max(lengths))
            started = time.perf_counter()
            try:
                results = self.decoder.generate(prompts, settings, gen_lengths=lengths)
            except Exception as exc:  # fail these requests (HTTP 500), keep serving
                log.exception("decoder failed on a batch of %d rows", len(prompts))
                self.metrics.record_batch(len(prompts), 0, time.perf_counter() - started, failed=len(batch))
                error = DecodeFailed(f"{type(exc).__name__}: {exc}")
                for w in batch:
                    w.loop.call_soon_threadsafe(_settle, w.future, None, error)
                continue
            tokens = sum(len(r.token_ids) for r in results)
            self.metrics.record_batch(len(prompts), tokens, time.perf_counter() - started)
            i = 0
            for w in batch:
                mine = results[i:i + len(w.prompts)]
                i += len(w.prompts)
                w.loop.call_soon_threadsafe(_settle, w.future, mine, None)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
