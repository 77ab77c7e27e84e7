"""The engine's scheduling: requests from the queue to the decoder, token deltas back to each request (run by a
worker thread or an engine process: :mod:`textwm.serving.workers`).

Two schedulers, one contract: each request (:class:`Work`, its ``n`` x prompts rows) gets
:class:`~textwm.serving.streaming.RowTokens` for its rows through ``Work.post`` (thread-safe, into
the request's event loop), or one :class:`~textwm.serving.streaming.RowsFailed`.

* :class:`BatchScheduler` runs whole batches through a reference decoder's ``generate``: requests
  with the same settings (``max_tokens`` aside: rows carry their own length) share a batch of up to
  ``max_batch_size`` rows, waiting at most ``batch_wait_ms`` for company; each row gets one delta
  with all its tokens when the batch ends.
* :class:`ContinuousScheduler` runs a slot-based ``DecodeEngine`` (``textwm.generation.engine``):
  at every step boundary (an SDAR block, a WeDLM window step, an AR token) queued requests join the
  running rows while rows are free and the engine says their settings are ``compatible``; rows
  leave as they finish, are cut by a stop string, or their client goes away. Admission is first
  come first served: a request that cannot join (incompatible settings, or more rows than are free)
  waits at the head of the queue, and those behind it wait too, until the running rows drain
  enough; so no request is passed over for ever (vLLM's scheduler is FCFS in the same way).
  While rows are running, queued requests join in groups: once ``join_min_rows`` requests wait (or as
  many as there are free rows), or the oldest has waited ``join_wait_ms``. A join runs a prefill, which
  on a small model costs several decode steps of host time; joining one request per step would spend
  most of the worker on prefills.

A decoder exception fails the requests it was serving (``DecodeFailed``) and the worker carries on.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textwm.generation.anchors import Layout
from textwm.generation.settings import DecodeSettings
from textwm.serving.metrics import ServerMetrics
from textwm.serving.streaming import RowsFailed, RowTokens

log = logging.getLogger(__name__)

#: How long an idle worker blocks on the queue before looking at its stop flag again.
IDLE_POLL_S = 0.2


class DecodeFailed(RuntimeError):
    """The decoder raised while serving this request's rows (HTTP 500, or an error event in a stream)."""


class RowsRefused(ValueError):
    """The decode engine refused a request's rows (HTTP 400, or an error event in a stream)."""


@dataclass(eq=False)
class Work:
    """One request's rows on the worker's queue.

    Args:
        prompts: token ids per row (``n`` copies of each prompt, in choice order).
        settings: decoding settings; ``gen_length`` is the request's max_tokens.
        post: puts a RowTokens / RowsFailed into the request's inbox (callable from any thread).
    """

    prompts: list[list[int]]
    settings: DecodeSettings
    post: Callable[[Any], None]
    enqueued: float = field(default_factory=time.perf_counter)
    #: Rows the request no longer wants (set from the event loop: a new frozenset each time, read here).
    cancelled: frozenset[int] = frozenset()
    #: An anchored request: each row's template layout (the continuous scheduler only; a row's finished
    #: ``token_ids`` are then its canvas).
    layouts: list[Layout] | None = None

    @property
    def batch_key(self) -> DecodeSettings:
        return self.settings.batch_key()

    @property
    def abandoned(self) -> bool:
        return len(self.cancelled) >= len(self.prompts)


class Intake:
    """The bounded queue plus the requests taken from it but not served yet (``held``, served first)."""

    def __init__(self, maxsize: int):
        self.queue: queue.Queue[Work] = queue.Queue(maxsize=maxsize)
        self.held: deque[Work] = deque()

    @property
    def depth(self) -> int:
        return self.queue.qsize() + len(self.held)

    def take(self, timeout: float | None) -> Work | None:
        """The next live request: held ones first; None when nothing came within ``timeout`` (None: don't wait)."""
        while True:
            if self.held:
                work = self.held.popleft()
            else:
                try:
                    work = self.queue.get(timeout=timeout) if timeout else self.queue.get_nowait()
                except queue.Empty:
                    return None
            if not work.abandoned:  # the client went away while it waited
                return work

    def oldest_wait(self, now: float) -> float:
        """Seconds the first request in line has waited (0 when none waits)."""
        if self.held:
            return now - self.held[0].enqueued
        with self.queue.mutex:
            return now - self.queue.queue[0].enqueued if self.queue.queue else 0.0

    def drain(self) -> list[Work]:
        works = list(self.held)
        self.held.clear()
        while True:
            try:
                works.append(self.queue.get_nowait())
            except queue.Empty:
                return works


class BatchScheduler:
    """Whole batches through ``decoder.generate(prompts, settings, gen_lengths)`` (a reference decoder)."""

    def __init__(self, decoder: Any, intake: Intake, *, max_batch_size: int, batch_wait_ms: float,
                 metrics: ServerMetrics):
        self.decoder = decoder
        self.intake = intake
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.metrics = metrics

    def _collect(self, first: Work) -> list[Work]:
        """``first`` plus queued work with the same settings, up to max_batch_size rows."""
        batch, rows = [first], len(first.prompts)
        deadline = time.perf_counter() + self.batch_wait_s
        skipped: list[Work] = []
        while rows < self.max_batch_size:
            work = self.intake.take(timeout=max(deadline - time.perf_counter(), 0) or None)
            if work is None:
                break
            if work.batch_key == first.batch_key and rows + len(work.prompts) <= self.max_batch_size:
                batch.append(work)
                rows += len(work.prompts)
            else:
                skipped.append(work)
        self.intake.held.extend(skipped)
        return batch

    def run_once(self) -> None:
        first = self.intake.take(timeout=IDLE_POLL_S)
        if first is None:
            return
        batch = self._collect(first)
        prompts = [p for w in batch for p in w.prompts]
        lengths = [w.settings.gen_length for w in batch for _ in w.prompts]
        settings = dataclasses.replace(first.settings, gen_length=max(lengths))
        self.metrics.rows_running = len(prompts)
        started = time.perf_counter()
        try:
            results = self.decoder.generate(prompts, settings, gen_lengths=lengths)
        except Exception as exc:  # fail these requests (HTTP 500), keep serving; logged, counted
            log.exception("decoder failed on a batch of %d rows", len(prompts))
            self.metrics.rows_running = 0
            self.metrics.record_step(len(prompts), 0, time.perf_counter() - started, failed=len(batch))
            for w in batch:
                w.post(RowsFailed(DecodeFailed(f"{type(exc).__name__}: {exc}")))
            return
        self.metrics.rows_running = 0
        self.metrics.record_step(len(prompts), sum(len(r.token_ids) for r in results), time.perf_counter() - started)
        i = 0
        for w in batch:
            for row in range(len(w.prompts)):
                g = results[i]
                i += 1
                w.post(RowTokens(row, list(g.token_ids), g))

    def shutdown(self, error: BaseException) -> None:
        for w in self.intake.drain():
            w.post(RowsFailed(error))


class ContinuousScheduler:
    """Continuous batching over a slot-based decode engine (``textwm.generation.engine.DecodeEngine``).

    Args:
        make_engine: builds the DecodeEngine (after a failed step its rows are dropped: ``engine.reset()``).
        intake: the request queue.
        max_batch_size: rows decoded together at most (the engine's ``max_rows``).
        metrics: step, token and occupancy counters.
        join_min_rows: while rows run, queued requests join once this many wait (or as many as rows are free);
            0: an eighth of ``max_batch_size``; 1: every step.
        join_wait_ms: ... or once the oldest has waited this long.
    """

    def __init__(self, make_engine: Callable[[], Any], intake: Intake, *, max_batch_size: int,
                 metrics: ServerMetrics, join_min_rows: int = 0, join_wait_ms: float = 20.0):
        if join_min_rows < 0 or join_wait_ms < 0:
            raise ValueError(f"join_min_rows and join_wait_ms must be >= 0, got {join_min_rows} and {join_wait_ms}")
        self.make_engine = make_engine
        self.engine = make_engine()
        self.intake = intake
        self.max_rows = min(max_batch_size, self.engine.max_rows)
        self.metrics = metrics
        self.join_min_rows = join_min_rows or max(1, self.max_rows // 8)
        self.join_wait_s = join_wait_ms / 1000
        self._publish_engine_counters()   # the warm-up's, so that the first step's deltas are its own
        self.active: dict[tuple[int, int], tuple[Work, int]] = {}   # engine key -> (request, row)

    def _free_rows(self) -> int:
        return self.max_rows - self.engine.num_active

    def _drop_cancelled(self) -> None:
        for key, (work, row) in list(self.active.items()):
            if row in work.cancelled:
                self.engine.cancel(key)
                del self.active[key]

    def _admit(self, work: Work) -> bool:
        """Admit every row of ``work`` or none: False when it must wait (too few free rows, incompatible)."""
        if len(work.prompts) > self._free_rows() or not self.engine.compatible(work.settings):
            return False
        if work.settings.seed is not None and self.engine.num_active:
            return False   # a seeded request decodes alone: rows share the engine's generator
        admitted: list[tuple[int, int]] = []
        try:
            for row, prompt in enumerate(work.prompts):
                if row in work.cancelled:
                    continue
                key = (id(work), row)
                self.engine.admit(key, prompt, work.settings, work.settings.gen_length,
                                  work.layouts[row] if work.layouts is not None else None)
                admitted.append(key)
                self.active[key] = (work, row)
        except ValueError as exc:  # the engine's own checks (empty, too long, incompatible)
            for key in admitted:
                self.engine.cancel(key)
                del self.active[key]
            work.post(RowsFailed(RowsRefused(f"the decode engine refused the request: {exc}")))
        return True

    def _join_now(self) -> bool:
        """Whether queued requests join at this step boundary (the class docstring: joins come in groups)."""
        if self.engine.num_active == 0:
            return True
        waiting = self.intake.depth
        if waiting == 0:
            return False
        if waiting >= min(self.join_min_rows, self._free_rows()):
            return True
        return self.intake.oldest_wait(time.perf_counter()) >= self.join_wait_s

    def _admit_queued(self) -> None:
        """At a step boundary: admit queued requests in order while they fit (blocking while idle)."""
        if not self._join_now():
            return
        while self._free_rows() > 0:
            idle = self.engine.num_active == 0
            work = self.intake.take(timeout=IDLE_POLL_S if idle else None)
            if work is None:
                return
            if not self._admit(work):
                if idle:   # an empty engine takes any settings: only a request wider than max_rows lands here
                    work.post(RowsFailed(RowsRefused(f"the decode engine cannot take these {len(work.prompts)} "
                                                     f"rows even when idle (max {self.max_rows} rows)")))
                    continue
                self.intake.held.appendleft(work)   # first in line once the running rows drain
                return

    def run_once(self) -> None:
        self._drop_cancelled()
        self._admit_queued()
        rows = self.engine.num_active
        self.metrics.rows_running = rows
        if rows == 0:
            return
        started = time.perf_counter()
        try:
            updates = self.engine.step()
        except Exception as exc:  # fail the running requests (HTTP 500), keep serving
            log.exception("decode engine failed a step of %d rows", rows)
            self._fail_running(exc, time.perf_counter() - started)
            return
        self.metrics.record_step(rows, sum(len(u.token_ids) for u in updates), time.perf_counter() - started)
        self._publish_engine_counters()
        for u in updates:
            work, row = self.active.get(u.key, (None, 0))
            if work is None:
                continue   # cancelled this step
            if u.finished is not None:
                del self.active[u.key]
            if u.token_ids or u.finished is not None:
                work.post(RowTokens(row, list(u.token_ids), u.finished))

    def _publish_engine_counters(self) -> None:
        """The engine's prompt-token, graph and time counters into the server's metrics."""
        m, prompts, stats = self.metrics, self.engine.prompt_stats, self.engine.stats
        m.prompt_tokens, m.prefix_cache_hit_tokens, m.prompt_tokens_computed = (
            prompts.prompt_tokens, prompts.hit_tokens, prompts.computed_tokens)
        m.prefill_forwards, m.prefill_forwards_unbucketed = prompts.forwards, prompts.unbucketed_forwards
        m.cuda_graphs, m.compiles, m.warm_up_seconds = self.engine.num_graphs, self.engine.num_compiles, stats.warm_up_s
        m.prefill_seconds, m.step_seconds = stats.prefill_s, stats.decode_s

    def _fail_running(self, exc: BaseException, seconds: float) -> None:
        """Fail the running requests first (nothing below may leave them waiting), then drop their rows in place
        (a second engine would allocate a second KV cache next to the first)."""
        works = {id(w): w for w, _ in self.active.values()}
        self.metrics.record_step(len(self.active), 0, seconds, failed=len(works))
        error = DecodeFailed(f"{type(exc).__name__}: {exc}")
        self.active.clear()
        self.metrics.rows_running = 0
        for w in works.values():
            w.post(RowsFailed(error))
        self.engine.reset()

    def shutdown(self, error: BaseException) -> None:
        """Fail the running and queued requests and free their rows (the engine may serve a next app)."""
        works = {id(w): w for w, _ in self.active.values()}
        for key in self.active:
            self.engine.cancel(key)
        self.active.clear()
        self.metrics.rows_running = 0
        for w in [*works.values(), *self.intake.drain()]:
            w.post(RowsFailed(error))
