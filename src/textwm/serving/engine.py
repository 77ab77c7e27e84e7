"""The serving engine: requests turned into rows of token ids, a bounded queue, and the worker's scheduler.

:meth:`Engine.prepare_chat` / :meth:`Engine.prepare_completion` check a request and tokenise it
(off the event loop); :meth:`Engine.submit` queues its rows and returns a
:class:`~textwm.serving.streaming.Submission` whose text deltas the HTTP layer streams or joins.
A full queue rejects at once (:class:`QueueFull`, HTTP 503); a decoder exception fails the requests
it was serving (:class:`DecodeFailed`, HTTP 500 or an error event) and the engine carries on. The
scheduler (:mod:`textwm.serving.scheduler`) batches whole requests through the family's decoder, or
batches continuously over the slot-based decode engine.

The worker (a thread of this process, or an engine process: :mod:`textwm.serving.workers`) only schedules
and steps: requests are templated and tokenised before they are queued, and its events reach the event loop
through one :class:`~textwm.serving.streaming.LoopMailbox` (one wake-up per step).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

from textwm.generation.anchors import AnchoredAnswer, Layout, answer, lay_out, parse_template, slots_of
from textwm.generation.anchors import TemplateError as AnchorTemplateError
from textwm.generation.base import Generation
from textwm.generation.decoders import make_decoder, reference_decoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import LoadedModel
from textwm.models.families import get_family
from textwm.serving.engine_config import EngineConfig
from textwm.serving.engine_process import ModelSource, ProcessWorker
from textwm.serving.metrics import ServerMetrics
from textwm.serving.protocol import ChatCompletionRequest, CompletionRequest, SamplingRequest
from textwm.serving.scheduler import (
    BatchScheduler,
    ContinuousScheduler,
    DecodeFailed,
    Intake,
    RowsRefused,
    Work,
)
from textwm.serving.streaming import LoopMailbox, RowsFailed, Submission, TextRow, text_decoder
from textwm.serving.templates import TemplateError, TemplateSandbox, check_template_kwargs
from textwm.serving.workers import ThreadWorker, make_scheduler

log = logging.getLogger(__name__)

__all__ = ["DecodeFailed", "Engine", "EngineConfig", "ModelSource", "Prepared", "QueueFull", "RequestError",
           "RowsRefused", "UnknownModel"]


class RequestError(ValueError):
    """The request cannot be served as asked (HTTP 400)."""


class UnknownModel(LookupError):
    """The request names a model this server does not serve (HTTP 404)."""


class QueueFull(RuntimeError):
    """The request queue is at capacity (HTTP 503)."""


#: A prompt of more characters than this many per token of max_model_len is refused before tokenising.
MAX_CHARS_PER_TOKEN = 16
#: SDAR settings a request may override under generate.py rules but not under lmdeploy's (per server there).
SERVER_DIFFUSION_FIELDS = ("denoising_steps", "block_length", "confidence_threshold", "remasking_strategy")


@dataclass
class Prepared:
    """A checked, tokenised request: one prompt per row (choice order), ready for :meth:`Engine.submit`."""

    prompts: list[list[int]]
    settings: DecodeSettings
    max_tokens: int
    prompt_tokens: int
    stops: list[str]
    #: Legacy completions with ``echo``: each row's prompt text (its text starts with it).
    echo: list[str] | None = None
    #: An anchored request (``response_template``): each row's layout (:mod:`textwm.generation.anchors`).
    layouts: list[Layout] | None = None


class Engine:
    """Requests in, text deltas out, over a worker that runs the scheduler (:mod:`textwm.serving.workers`).

    Args:
        loaded: the checkpoint; with ``source``, its tokenizer and spec only (``model`` may be None:
            :func:`~textwm.models.checkpoint.load_tokenizer`).
        config: the engine's settings.
        source: where an engine process loads the checkpoint from; given (and ``config.engine_process``), the
            continuous scheduler runs in a child process (:mod:`textwm.serving.engine_process`), else on a
            thread of this process.
    """

    def __init__(self, loaded: LoadedModel, config: EngineConfig, *, source: ModelSource | None = None):
        if config.engine_process and source is None:
            raise ValueError("engine_process needs the checkpoint's source (where the engine process loads it)")
        self.loaded = loaded
        self.config = config
        self.tokenizer = loaded.tokenizer
        self.family = loaded.spec.family
        #: SDAR's fixed blocks: block lengths checked against the checkpoint, lmdeploy's rules available.
        self.block_causal = get_family(self.family).block_causal
        self.metrics = ServerMetrics()
        self.worker: ThreadWorker | ProcessWorker = (
            ProcessWorker(source, config, self.metrics) if source is not None and config.engine_process
            else ThreadWorker(self._make_scheduler, config.max_queue, self.metrics))
        self.metrics.engine_process = isinstance(self.worker, ProcessWorker)
        self._templates: TemplateSandbox | None = None
        self._told_overrides_ignored = False
        self._decode = text_decoder(loaded.tokenizer)
        # Anchored requests under the batch scheduler: the family's reference decoder, one batch at a time.
        self._anchored_lock = threading.Lock()
        self._anchored_decoder: Any = None
        self._mailbox: LoopMailbox | None = None
        if self.block_causal:
            loaded.spec.require_diffusion(config.defaults.block_length, rules=config.defaults.sdar_rules)
        if loaded.model is not None:
            _ = self.decoder   # the family's checks of the checkpoint (a mask token) fail here, before serving

    @functools.cached_property
    def decoder(self) -> Any:
        """The family's decoder on this process's weights (the batch scheduler's)."""
        return make_decoder(self.loaded.model, self.loaded.spec, pad_token_id=self.tokenizer.pad_token_id)

    @functools.cached_property
    def vocab_size(self) -> int:
        """Rows of the model's input embeddings (token ids at or past it are refused)."""
        if self.loaded.model is None:
            return int(self.worker.info["vocab_size"])   # an engine process's, once started
        return int(self.loaded.model.get_input_embeddings().weight.shape[0])

    # --- lifecycle -------------------------------------------------------------------------------

    def _make_scheduler(self, intake: Intake) -> BatchScheduler | ContinuousScheduler:
        return make_scheduler(self.loaded, self.config, intake, self.metrics, lambda: self.decoder)

    @property
    def scheduler(self) -> BatchScheduler | ContinuousScheduler | None:
        """The running scheduler of a worker thread (None before :meth:`start`, and in an engine process)."""
        return getattr(self.worker, "scheduler", None)

    @property
    def scheduler_name(self) -> str:
        if isinstance(self.worker, ProcessWorker):
            return f"{self.worker.info.get('scheduler', 'a scheduler')} in an engine process"
        return type(self.scheduler).__name__

    @property
    def failure(self) -> str | None:
        """Why the engine cannot serve (an engine process that exited), else None."""
        return self.worker.failure

    def start(self) -> None:
        """Start the worker (the first start builds the scheduler, or spawns the engine process, and warms up)."""
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop(DecodeFailed("the server is shutting down"))
        if self._templates is not None:
            self._templates.close()

    @property
    def queue_depth(self) -> int:
        return self.worker.depth

    # --- requests --------------------------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.config.served_model_name:
            raise UnknownModel(f"model {model!r} is not served here; this server serves "
                               f"{self.config.served_model_name!r} (see /v1/models)")

    def check_limits(self, request: SamplingRequest) -> list[str]:
        """The request's stop strings, within the server's limits (RequestError naming the limit's flag)."""
        stops = request.stop_strings()
        c = self.config
        if len(stops) > c.max_stop_strings:
            raise RequestError(f"stop: {len(stops)} strings, more than the server's --max-stop-strings "
                               f"{c.max_stop_strings}")
        chars = sum(len(s) for s in stops)
        if chars > c.max_stop_chars:
            raise RequestError(f"stop: {chars} characters in all, more than the server's --max-stop-chars "
                               f"{c.max_stop_chars}")
        messages = getattr(request, "messages", None)
        if messages is not None and len(messages) > c.max_messages:
            raise RequestError(f"messages: {len(messages)}, more than the server's --max-messages {c.max_messages}")
        return stops

    def settings_for(self, request: SamplingRequest) -> tuple[DecodeSettings, int]:
        """Decode settings of a request (its fields over the server defaults) and its max_tokens."""
        d = self.config.defaults
        max_tokens = request.requested_max_tokens() or d.gen_length
        overrides: dict[str, Any] = {
            "temperature": request.temperature, "top_p": request.top_p, "seed": request.seed,
            "top_k": None if request.top_k is None else max(request.top_k, 0),
            "repetition_penalty": request.repetition_penalty,
            "denoising_steps": request.num_diffusion_steps, "block_length": request.block_length,
            "confidence_threshold": request.confidence_threshold, "remasking_strategy": request.remasking_strategy,
            "window_size": request.window_size, "entropy_threshold": request.entropy_threshold,
            "position_penalty": request.position_penalty,
        }
        if self.block_causal and d.sdar_rules == "lmdeploy":
            self._drop_diffusion_overrides(overrides)
        try:
            settings = dataclasses.replace(d, gen_length=max_tokens,
                                           **{k: v for k, v in overrides.items() if v is not None})
            steps = overrides.get("denoising_steps")      # None too where the SDAR rules ignore a request's
            if self.block_causal and steps is not None and steps > settings.block_length:
                # The decoders keep per-step state of this length: a request may not size it past what a block
                # can use (each step fills at least one of the block's tokens).
                raise ValueError(f"num_diffusion_steps must be at most block_length ({settings.block_length}): a "
                                 f"block of that many tokens takes at most that many steps, got {steps}")
            if self.block_causal:
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

    def _check_chars(self, chars: int, what: str) -> None:
        if chars > self.config.max_model_len * MAX_CHARS_PER_TOKEN:
            raise RequestError(f"{what} of {chars} characters cannot fit the server's max_model_len "
                               f"{self.config.max_model_len} tokens")

    def encode(self, request: ChatCompletionRequest) -> list[int]:
        """The chat prompt's token ids (CPU work: called off the event loop). RequestError for a bad template use."""
        messages = [m.model_dump() for m in request.messages]
        self._check_chars(sum(len(m["content"]) for m in messages), "messages")
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

    def encode_prompts(self, request: CompletionRequest) -> list[list[int]]:
        """A legacy completions request's prompts as token ids, no chat template (CPU work: off the event loop).

        Text is tokenised with the tokenizer's special tokens (a BOS where it adds one), as vLLM's
        completions do (``add_special_tokens=True``); token ids are taken as given, within the vocabulary.
        """
        prompts = request.prompts()
        self._check_chars(sum(len(p) for p in prompts if isinstance(p, str)), "prompts")
        ids = [self.tokenizer(p, add_special_tokens=True)["input_ids"] if isinstance(p, str) else p for p in prompts]
        for i, p in enumerate(ids):
            if not p:
                raise RequestError(f"prompt {i} is empty (0 tokens); send at least one token")
            bad = [t for t in p if t >= self.vocab_size]
            if bad:
                raise RequestError(f"prompt {i} holds token id {bad[0]}, outside the model's vocabulary of "
                                   f"{self.vocab_size}")
        return ids

    def _sandbox(self) -> TemplateSandbox:
        if self._templates is None:
            self._templates = TemplateSandbox()
        return self._templates

    def _rows(self, request: SamplingRequest, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """The rows (``n`` copies of each prompt) of a request, with the length checks."""
        for p in prompts:
            if len(p) + max_tokens > self.config.max_model_len:
                raise RequestError(f"prompt ({len(p)} tokens) + max_tokens ({max_tokens}) exceeds the server's "
                                   f"max_model_len {self.config.max_model_len}")
        rows = [p for p in prompts for _ in range(request.n)]
        if len(rows) > self.config.max_batch_size:
            raise RequestError(f"{len(prompts)} prompt(s) x n={request.n} is {len(rows)} rows, more than the "
                               f"server's max_batch_size {self.config.max_batch_size}; send fewer")
        return rows

    async def prepare_chat(self, request: ChatCompletionRequest) -> Prepared:
        """Check and tokenise a chat request (raises UnknownModel / RequestError for the HTTP layer to map)."""
        self.check_model(request.model)
        stops = self.check_limits(request)
        settings, max_tokens = self.settings_for(request)  # bad settings fail before the (slower) template work
        prompt = await asyncio.to_thread(self.encode, request)  # tokenising and templating: off the event loop
        rows = self._rows(request, [prompt], max_tokens)
        return Prepared(rows, settings, max_tokens, len(prompt), stops,
                        layouts=self._layouts(request, settings, max_tokens, rows))

    async def prepare_completion(self, request: CompletionRequest) -> Prepared:
        """Check and tokenise a legacy completions request (no chat template)."""
        self.check_model(request.model)
        stops = self.check_limits(request)
        settings, max_tokens = self.settings_for(request)
        prompts = await asyncio.to_thread(self.encode_prompts, request)
        rows = self._rows(request, prompts, max_tokens)
        echo = None
        if request.echo:
            texts = [p if isinstance(p, str) else self.tokenizer.decode(p) for p in request.prompts()]
            echo = [t for t in texts for _ in range(request.n)]
        return Prepared(rows, settings, max_tokens, sum(len(p) for p in prompts), stops, echo,
                        layouts=self._layouts(request, settings, max_tokens, rows))

    # --- anchored requests -----------------------------------------------------------------------

    def _layouts(self, request: SamplingRequest, settings: DecodeSettings, max_tokens: int,
                 rows: list[list[int]]) -> list[Layout] | None:
        """Each row's layout of the request's ``response_template`` (None without one); RequestError naming the
        problem (the template's item, or what it cannot be combined with)."""
        if request.response_template is None:
            return None
        if request.stream:
            raise RequestError("response_template: an anchored answer is returned whole; send stream=false")
        if request.stop_strings():
            raise RequestError("response_template: stop strings do not apply to an anchored answer (a slot ends "
                               "at a stop id or its size); leave stop out")
        if self.block_causal and settings.sdar_rules == "lmdeploy":
            raise RequestError("response_template: anchored decoding runs under the generate rules; this server "
                               "decodes SDAR under lmdeploy's (--sdar-rules generate)")
        if self.loaded.model is None and not self.worker.continuous:
            raise RequestError("response_template: the engine process runs the batch scheduler here, and anchored "
                               "answers need the continuous one (or --no-engine-process)")
        try:
            template = parse_template(request.response_template, max_tokens=max_tokens)
        except AnchorTemplateError as exc:
            raise RequestError(str(exc)) from None
        layout = lay_out(template, lambda text: self.tokenizer.encode(text, add_special_tokens=False), max_tokens)
        longest = max(len(p) for p in rows)
        if longest + len(layout) > self.config.max_model_len:
            raise RequestError(f"prompt ({longest} tokens) + the filled template ({len(layout)} tokens, its fixed "
                               f"strings included) exceeds the server's max_model_len {self.config.max_model_len}")
        return [layout] * len(rows)

    async def answer_anchored(self, prepared: Prepared) -> list[AnchoredAnswer]:
        """The filled templates of an anchored request's rows.

        Under the continuous scheduler its rows join the engine's running rows (anchors in their canvases,
        :mod:`textwm.generation.engine.anchor_table`); under the batch scheduler the family's reference decoder
        fills them on the model's weights off the event loop, beside the worker (one anchored batch at a time)."""
        assert prepared.layouts is not None
        self.metrics.anchored_requests += 1
        if self.worker.continuous:
            canvases = await self._canvases_from_engine(prepared)
            stop_ids = self.loaded.spec.stop_ids or ()
            answers = []
            for layout, row in zip(prepared.layouts, canvases):
                slots, finish = slots_of(layout, row.token_ids, stop_ids)
                answers.append(answer(layout, slots, self._decode, finish, row.num_forwards))
            return answers
        return await asyncio.to_thread(self._answer_anchored, prepared)

    async def _canvases_from_engine(self, prepared: Prepared) -> list[Generation]:
        """Queue an anchored request's rows for the worker and wait for every row's canvas."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        canvases: list[Generation | None] = [None] * len(prepared.prompts)

        def on_event(event: Any) -> None:   # on the event loop
            if done.done():
                return
            if isinstance(event, RowsFailed):
                done.set_exception(event.error)
            elif event.finished is not None:
                canvases[event.row] = event.finished
                if all(c is not None for c in canvases):
                    done.set_result(canvases)

        work = Work(prompts=prepared.prompts, settings=prepared.settings, layouts=prepared.layouts,
                    post=lambda event: loop.call_soon_threadsafe(on_event, event))
        self._put(work)
        try:
            return await done
        except asyncio.CancelledError:    # the client went away: free its rows
            self.worker.cancel(work, list(range(len(prepared.prompts))))
            raise

    def _answer_anchored(self, prepared: Prepared) -> list[AnchoredAnswer]:
        with self._anchored_lock:
            if self._anchored_decoder is None:
                self._anchored_decoder = reference_decoder(self.loaded.model, self.loaded.spec,
                                                           pad_token_id=self.tokenizer.pad_token_id)
            try:
                # Slots decoded as every answer's text is (special tokens left out).
                return self._anchored_decoder.generate_anchored(prepared.prompts, prepared.layouts,
                                                                prepared.settings, self._decode)
            except Exception as exc:
                raise DecodeFailed(f"{type(exc).__name__}: {exc}") from exc

    def submit(self, prepared: Prepared) -> Submission:
        """Queue a prepared request's rows (QueueFull when the queue is full); call on the event loop.

        The worker's events for it go through the loop's one :class:`LoopMailbox` (one wake-up of the loop
        per burst of events, whatever the number of requests)."""
        mailbox = self._loop_mailbox()
        rows = [TextRow(self.tokenizer, prepared.stops, prepared.max_tokens, self._decode) for _ in prepared.prompts]
        work_ref: list[Work] = []
        submission = Submission(rows, prepared.prompt_tokens, cancel=lambda r: self.worker.cancel(work_ref[0], r))
        work = Work(prompts=prepared.prompts, settings=prepared.settings,
                    post=lambda event: mailbox.post(submission, event))
        work_ref.append(work)
        self._put(work)
        return submission

    def _put(self, work: Work) -> None:
        """Hand a request to the worker: QueueFull at capacity, DecodeFailed when the engine process is gone."""
        try:
            self.worker.put(work)
        except queue.Full:
            raise QueueFull(f"request queue is full ({self.config.max_queue} waiting); retry later") from None

    def _loop_mailbox(self) -> LoopMailbox:
        """The running loop's mailbox (a new one when an app on another loop serves this engine next)."""
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = LoopMailbox(loop)
        return self._mailbox
