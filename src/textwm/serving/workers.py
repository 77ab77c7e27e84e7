"""Where the scheduler runs: a thread of the server's process, or a process of its own.

Both workers take a :class:`~textwm.serving.scheduler.Work` (:meth:`put`, ``queue.Full`` when the queue is at
capacity), stop decoding rows a request no longer wants (:meth:`cancel`) and call each work's ``post`` from a
thread other than the event loop's, so :class:`~textwm.serving.engine.Engine` serves requests the same way over
either.

* :class:`ThreadWorker`: the scheduler on a thread beside the event loop. The two share one GIL: each step's
  host work (sampling, bookkeeping, a replay's launch) waits while the loop parses HTTP and detokenises, and
  the loop waits while the worker steps.
* :class:`~textwm.serving.engine_process.ProcessWorker`: the scheduler and the model in a child process
  (``--engine-process``), so neither waits on the other's GIL.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from textwm.serving.engine_config import EngineConfig
from textwm.serving.metrics import ServerMetrics
from textwm.serving.scheduler import BatchScheduler, ContinuousScheduler, Intake, Work

log = logging.getLogger(__name__)

#: The interpreter's thread switch interval while a worker thread runs (CPython's default is 5 ms). The worker
#: and the event loop share one GIL; the worker releases it at every device read and torch call, and taking it
#: back from an event loop busy with HTTP and detokenising can take one whole interval.
WORKER_SWITCH_INTERVAL_S = 0.0005


class _SwitchInterval:
    """The interpreter's switch interval, lowered to :data:`WORKER_SWITCH_INTERVAL_S` while any worker thread
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


class ThreadWorker:
    """The scheduler on a daemon thread of this process (see the module docstring).

    Args:
        make_scheduler: builds the scheduler over the intake (once, at the first :meth:`start`; the continuous
            one allocates the KV cache and warms up then).
        max_queue: requests waiting at most.
        metrics: the server's counters (the worker thread records its steps and CPU time in them).
    """

    def __init__(self, make_scheduler: Callable[[Intake], Any], max_queue: int, metrics: ServerMetrics):
        self.make_scheduler = make_scheduler
        self.intake = Intake(max_queue)
        self.metrics = metrics
        self.scheduler: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lowered_switch = False   # this worker holds the lowered switch interval (start() to stop())

    @property
    def continuous(self) -> bool:
        return isinstance(self.scheduler, ContinuousScheduler)

    @property
    def depth(self) -> int:
        return self.intake.depth

    @property
    def failure(self) -> str | None:
        """Why the worker cannot serve (None: it can); a thread worker outlives its faults."""
        return None

    def start(self) -> None:
        self._stop.clear()  # a worker stopped by one app's shutdown can serve the next
        if self.scheduler is None:
            self.scheduler = self.make_scheduler(self.intake)
        if not self._lowered_switch:
            _SWITCH_INTERVAL.acquire()
            self._lowered_switch = True
        self._thread = threading.Thread(target=self._run, name="textwm-engine", daemon=True)
        self._thread.start()

    def stop(self, error: BaseException) -> None:
        """Stop the thread, then fail the running and queued requests with ``error``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():   # a step longer than 30 s: do not touch its rows under it
                log.error("the decode worker did not stop within 30 s; its requests are left to it")
                return
        if self.scheduler is not None:
            self.scheduler.shutdown(error)
        if self._lowered_switch:
            _SWITCH_INTERVAL.release()
            self._lowered_switch = False

    def put(self, work: Work) -> None:
        self.intake.queue.put_nowait(work)

    @staticmethod
    def cancel(work: Work, rows: list[int]) -> None:
        work.cancelled = work.cancelled | frozenset(rows)   # one reference swap: the worker reads it between steps

    def _run(self) -> None:
        earlier_cpu = self.metrics.worker_cpu_seconds   # of the threads of earlier start()s: the counter goes on
        while not self._stop.is_set():
            run_turn(self.scheduler, self.metrics)
            self.metrics.worker_cpu_seconds = earlier_cpu + time.thread_time()


def make_scheduler(loaded: Any, config: EngineConfig, intake: Intake, metrics: ServerMetrics,
                   decoder: Callable[[], Any]) -> BatchScheduler | ContinuousScheduler:
    """The scheduler ``config`` asks for over ``loaded`` (a :class:`~textwm.models.checkpoint.LoadedModel`).

    The continuous one allocates the engine's KV cache now (``max_batch_size`` rows of ``max_model_len`` tokens)
    and, on CUDA, compiles and captures before the first request. ``scheduler="auto"`` falls back to the batch
    scheduler over ``decoder()`` (the family's decoder) where the engine does not run the architecture.
    """
    c = config
    if c.scheduler != "batch":
        # heavy: the decode engine loads transformers; the batch scheduler needs none
        from textwm.generation.engine import DecodeEngine
        from textwm.generation.engine.static_model import UnsupportedModel

        def make_engine() -> Any:
            engine = DecodeEngine(loaded.model, loaded.spec, pad_token_id=loaded.tokenizer.pad_token_id,
                                  max_rows=c.max_batch_size, max_len=c.max_model_len,
                                  prefix_cache_tokens=None if c.prefix_cache else 0,
                                  prefill_graph_tokens=c.prefill_graph_tokens)
            if engine.net.device.type == "cuda":   # compiles and graph captures before the first request
                engine.warm_up(c.defaults, every_shape=c.warm_every_shape)
                log.info("warm-up: %d CUDA graphs in %.1f s", engine.num_graphs, engine.stats.warm_up_s)
            return engine
        try:
            scheduler = ContinuousScheduler(make_engine, intake, max_batch_size=c.max_batch_size, metrics=metrics,
                                            join_min_rows=c.join_min_rows, join_wait_ms=c.join_wait_ms)
            log.info("continuous batching: a KV cache of %d rows x %d tokens (--max-batch-size x --max-model-len)",
                     c.max_batch_size, c.max_model_len)
            return scheduler
        except UnsupportedModel as exc:
            if c.scheduler == "continuous":
                raise
            log.warning("serving with the batch scheduler (no continuous batching): %s", exc)
    return BatchScheduler(decoder(), intake, max_batch_size=c.max_batch_size, batch_wait_ms=c.batch_wait_ms,
                          metrics=metrics)


def run_turn(scheduler: Any, metrics: ServerMetrics) -> None:
    """One turn of a scheduler (joins, one step); a fault outside the decoder's own handling is logged and
    counted, and the worker carries on."""
    try:
        scheduler.run_once()
    except Exception:
        log.exception("the decode worker's step failed")
        metrics.worker_errors += 1


__all__ = ["WORKER_SWITCH_INTERVAL_S", "ThreadWorker", "make_scheduler", "run_turn"]
