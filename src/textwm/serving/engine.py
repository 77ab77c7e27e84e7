"""The serving engine: requests turned into rows of token ids, a bounded queue, and the worker thread's scheduler.

:meth:`Engine.prepare_chat` / :meth:`Engine.prepare_completion` check a request and tokenise it
(off the event loop); :meth:`Engine.submit` queues its rows and returns a
:class:`~textwm.serving.streaming.Submission` whose text deltas the HTTP layer streams or joins.
A full queue rejects at once (:class:`QueueFull`, HTTP 503); a decoder exception fails the requests
it was serving (:class:`DecodeFailed`, HTTP 500 or an error event) and the engine carries on. The
scheduler (:mod:`textwm.serving.scheduler`) batches whole requests through the family's decoder, or
batches continuously over the slot-based decode engine.

The worker thread only schedules and steps: requests are templated and tokenised before they are queued,
its events reach the event loop through one :class:`~textwm.serving.streaming.LoopMailbox` (one wake-up
per step), and while it runs the interpreter switches threads every :data:`WORKER_SWITCH_INTERVAL_S`, so
that the worker gets the GIL back soon after each device read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from textwm.generation.anchors import AnchoredAnswer, Layout, answer, lay_out, parse_template, slots_of
from textwm.generation.anchors import TemplateError as AnchorTemplateError
from textwm.generation.base import Generation
from textwm.generation.decoders import make_decoder, reference_decoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import LoadedModel
from textwm.models.families import get_family
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

log = logging.getLogger(__name__)

__all__ = ["DecodeFailed", "Engine", "EngineConfig", "Prepared", "QueueFull", "RequestError", "RowsRefused",
           "UnknownModel"]


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
SCHEDULERS = ("auto", "continuous", "batch")
#: The interpreter's thread switch interval while a worker runs (CPython's default is 5 ms). The worker
#: and the event loop share one GIL; the worker releases it at every device read (``.tolist()``, ``bool``,
#: a host-to-device copy), and taking it back from an event loop busy with HTTP and detokenising can take
#: one whole interval: with 5 ms and the ~25 device reads of an SDAR step (the ~14 of an AR step), up to
#: ~125 ms (~70 ms) a step.
WORKER_SWITCH_INTERVAL_S = 0.0005


class _SwitchInterval:
    """The interpreter's switch interval, lowered to :data:`WORKER_SWITCH_INTERVAL_S` while any engine's worker
    runs and restored when the last one stops (tests and notebooks may run several engines in one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved = sys.getswitchinterval()

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(WORKER_SWITCH_INTERVAL_S, self._saved))
                log.info("thread switch interval %.2g ms while the decode worker runs (was %.2g ms)",
                         1000 * sys.getswitchinterval(), 1000 * self._saved)
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                sys.setswitchinterval(self._saved)


_SWITCH_INTERVAL = _SwitchInterval()


@dataclass(frozen=True)
class EngineConfig:
    served_model_name: str
    defaults: DecodeSettings = DecodeSettings(gen_length=256)
    #: Rows decoded together at most (a request's n x prompts rows must fit).
    max_batch_size: int = 32
    max_queue: int = 256
    #: Batch scheduler: how long a batch waits for company.
    batch_wait_ms: float = 5.0
    #: Continuous scheduler: queued requests join the running rows once this many wait (0: max_batch_size / 8)...
    join_min_rows: int = 0
    #: ... or once the oldest has waited this long.
    join_wait_ms: float = 20.0
    #: Prompt + max_tokens must fit in this many tokens.
    max_model_len: int = 8192
    #: Continuous scheduler: keep prompt prefixes' K/V for the next prompts that start the same way
    #: (``textwm.generation.engine.prefix_cache``).
    prefix_cache: bool = True
    #: Continuous scheduler: prefills of at most this many tokens, bucketed, replay a CUDA graph
    #: (``textwm.generation.engine.prefill``); None: the engine's default; 0: eager.
    prefill_graph_tokens: int | None = None
    #: Continuous scheduler on CUDA: capture every row bucket's and kv bucket's graph before serving
    #: (``DecodeEngine.warm_up``); False: the smallest ones only, the rest on first use.
    warm_every_shape: bool = True
    #: Accept a ``chat_template`` in ``chat_template_kwargs`` (rendered in a sandboxed process with limits).
    allow_client_chat_template: bool = False
    #: Stop strings per request at most, and their characters together: stop matching runs on every new piece
    #: of every row's text, so its work is bounded per request.
    max_stop_strings: int = 32
    max_stop_chars: int = 4096
    #: Messages of a chat request at most.
    max_messages: int = 1024
    #: ``continuous``: requests join and leave the running rows at every step boundary
    #: (``textwm.generation.engine.DecodeEngine``); ``batch``: whole batches through the family's decoder;
    #: ``auto``: continuous where the engine runs the checkpoint's architecture, else batch (with a warning).
    scheduler: str = "auto"

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        for name in ("max_batch_size", "max_queue", "max_stop_strings", "max_stop_chars", "max_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


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
    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.loaded = loaded
        self.config = config
        self.tokenizer = loaded.tokenizer
        self.family = loaded.spec.family
        #: SDAR's fixed blocks: block lengths checked against the checkpoint, lmdeploy's rules available.
        self.block_causal = get_family(self.family).block_causal
        self.vocab_size = int(loaded.model.get_input_embeddings().weight.shape[0])
        self.metrics = ServerMetrics()
        self.decoder = make_decoder(loaded.model, loaded.spec, pad_token_id=loaded.tokenizer.pad_token_id)
        self._intake = Intake(config.max_queue)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scheduler: BatchScheduler | ContinuousScheduler | None = None
        self._templates: TemplateSandbox | None = None
        self._told_overrides_ignored = False
        self._decode = text_decoder(loaded.tokenizer)
        # Anchored requests: the family's reference decoder on the same weights, one batch at a time.
        self._anchored_lock = threading.Lock()
        self._anchored_decoder: Any = None
        self._mailbox: LoopMailbox | None = None
        self._lowered_switch = False   # this engine holds the lowered switch interval (start() to stop())
        if self.block_causal:
            loaded.spec.require_diffusion(config.defaults.block_length, rules=config.defaults.sdar_rules)

    # --- lifecycle -------------------------------------------------------------------------------

    def _make_scheduler(self) -> BatchScheduler | ContinuousScheduler:
        """The worker's scheduler; the continuous one allocates the engine's KV cache now (max_batch_size rows
        of max_model_len tokens)."""
        c = self.config
        if c.scheduler != "batch":
            # heavy: the decode engine loads transformers; the batch scheduler needs none
            from textwm.generation.engine import DecodeEngine
            from textwm.generation.engine.static_model import UnsupportedModel

            def make_engine() -> Any:
                engine = DecodeEngine(self.loaded.model, self.loaded.spec, pad_token_id=self.tokenizer.pad_token_id,
                                      max_rows=c.max_batch_size, max_len=c.max_model_len,
                                      prefix_cache_tokens=None if c.prefix_cache else 0,
                                      prefill_graph_tokens=c.prefill_graph_tokens)
                if engine.net.device.type == "cuda":   # compiles and graph captures before the first request
                    engine.warm_up(c.defaults, every_shape=c.warm_every_shape)
                    log.info("warm-up: %d CUDA graphs in %.1f s", engine.num_graphs, engine.stats.warm_up_s)
                return engine
            try:
                scheduler = ContinuousScheduler(make_engine, self._intake, max_batch_size=c.max_batch_size,
                                                metrics=self.metrics, join_min_rows=c.join_min_rows,
                                                join_wait_ms=c.join_wait_ms)
                log.info("continuous batching: a KV cache of %d rows x %d tokens (--max-batch-size x "
                         "--max-model-len)", c.max_batch_size, c.max_model_len)
                return scheduler
            except UnsupportedModel as exc:
                if c.scheduler == "continuous":
                    raise
                log.warning("serving with the batch scheduler (no continuous batching): %s", exc)
        return BatchScheduler(self.decoder, self._intake, max_batch_size=c.max_batch_size,
                              batch_wait_ms=c.batch_wait_ms, metrics=self.metrics)

    @property
    def scheduler(self) -> BatchScheduler | ContinuousScheduler | None:
        """The running scheduler (None before :meth:`start`)."""
        return self._scheduler

    def start(self) -> None:
        self._stop.clear()  # an engine stopped by one app's shutdown can serve the next
        if self._scheduler is None:
            self._scheduler = self._make_scheduler()
        if not self._lowered_switch:
            _SWITCH_INTERVAL.acquire()
            self._lowered_switch = True
        self._thread = threading.Thread(target=self._run, name="textwm-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():   # a step longer than 30 s: do not touch its rows under it
                log.error("the decode worker did not stop within 30 s; its requests are left to it")
                return
        if self._scheduler is not None:
            self._scheduler.shutdown(DecodeFailed("the server is shutting down"))
        if self._templates is not None:
            self._templates.close()
        if self._lowered_switch:
            _SWITCH_INTERVAL.release()
            self._lowered_switch = False

    def _run(self) -> None:
        assert self._scheduler is not None
        earlier_cpu = self.metrics.worker_cpu_seconds   # of the threads of earlier start()s: the counter goes on
        while not self._stop.is_set():
            try:
                self._scheduler.run_once()
            except Exception:   # a fault outside the decoder's own handling: log it, keep the worker alive
                log.exception("the decode worker's step failed")
                self.metrics.worker_errors += 1
            self.metrics.worker_cpu_seconds = earlier_cpu + time.thread_time()

    @property
    def queue_depth(self) -> int:
        return self._intake.depth

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

    def _rows(self, request: SamplingRequest, prompts: list[list[int]]) -> tuple[DecodeSettings, int, list[list[int]]]:
        """Settings, max_tokens and the rows (``n`` copies of each prompt) of a request, with the length checks."""
        settings, max_tokens = self.settings_for(request)
        for p in prompts:
            if len(p) + max_tokens > self.config.max_model_len:
                raise RequestError(f"prompt ({len(p)} tokens) + max_tokens ({max_tokens}) exceeds the server's "
                                   f"max_model_len {self.config.max_model_len}")
        rows = [p for p in prompts for _ in range(request.n)]
        if len(rows) > self.config.max_batch_size:
            raise RequestError(f"{len(prompts)} prompt(s) x n={request.n} is {len(rows)} rows, more than the "
                               f"server's max_batch_size {self.config.max_batch_size}; send fewer")
        return settings, max_tokens, rows

    async def prepare_chat(self, request: ChatCompletionRequest) -> Prepared:
        """Check and tokenise a chat request (raises UnknownModel / RequestError for the HTTP layer to map)."""
        self.check_model(request.model)
        stops = self.check_limits(request)
        self.settings_for(request)  # bad settings fail before the (slower) template work
        prompt = await asyncio.to_thread(self.encode, request)  # tokenising and templating: off the event loop
        settings, max_tokens, rows = self._rows(request, [prompt])
        return Prepared(rows, settings, max_tokens, len(prompt), stops,
                        layouts=self._layouts(request, settings, max_tokens, rows))

    async def prepare_completion(self, request: CompletionRequest) -> Prepared:
        """Check and tokenise a legacy completions request (no chat template)."""
        self.check_model(request.model)
        stops = self.check_limits(request)
        self.settings_for(request)
        prompts = await asyncio.to_thread(self.encode_prompts, request)
        settings, max_tokens, rows = self._rows(request, prompts)
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
        if isinstance(self._scheduler, ContinuousScheduler):
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
        try:
            self._intake.queue.put_nowait(work)
        except queue.Full:
            raise QueueFull(f"request queue is full ({self.config.max_queue} waiting); retry later") from None
        try:
            return await done
        except asyncio.CancelledError:    # the client went away: free its rows
            self._cancel(work, list(range(len(prepared.prompts))))
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
        submission = Submission(rows, prepared.prompt_tokens, cancel=lambda r: self._cancel(work_ref[0], r))
        work = Work(prompts=prepared.prompts, settings=prepared.settings,
                    post=lambda event: mailbox.post(submission, event))
        work_ref.append(work)
        try:
            self._intake.queue.put_nowait(work)
        except queue.Full:
            raise QueueFull(f"request queue is full ({self.config.max_queue} waiting); retry later") from None
        return submission

    def _loop_mailbox(self) -> LoopMailbox:
        """The running loop's mailbox (a new one when an app on another loop serves this engine next)."""
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = LoopMailbox(loop)
        return self._mailbox

    @staticmethod
    def _cancel(work: Work, rows: list[int]) -> None:
        work.cancelled = work.cancelled | frozenset(rows)   # one reference swap: the worker reads it between steps
