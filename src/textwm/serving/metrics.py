"""Server counters, rendered in the Prometheus text exposition format (``GET /metrics``).

The worker thread records each decoder step (a batch under the batch scheduler; an SDAR block, a
WeDLM window step or an AR token under continuous batching) with the rows it ran, so occupancy reads
as rows running now (a gauge) and rows per step (a mean over the last :data:`RATE_WINDOW_S` seconds,
and the two totals).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Window of the tokens/s and rows-per-step gauges.
RATE_WINDOW_S = 30.0
#: What the worker sets and an engine process reports: totals (a new engine process's add to its predecessors')...
WORKER_COUNTERS = ("steps", "step_rows", "worker_errors", "worker_failed_requests", "prompt_tokens",
                   "prefix_cache_hit_tokens", "prompt_tokens_computed", "prefill_forwards",
                   "prefill_forwards_unbucketed", "generated_tokens", "decode_seconds", "prefill_seconds",
                   "step_seconds", "worker_cpu_seconds")
#: ... and values of now.
WORKER_GAUGES = ("rows_running", "cuda_graphs", "compiles", "warm_up_seconds", "worker_queue_depth")


@dataclass
class ServerMetrics:
    requests: int = 0
    steps: int = 0
    step_rows: int = 0
    failed_requests: int = 0
    #: Streams that ended with an error event after they started (their HTTP status was already 200).
    stream_errors: int = 0
    #: Faults of the worker thread outside the decoder's own error handling (logged; the worker carries on).
    worker_errors: int = 0
    #: Requests with a response_template.
    anchored_requests: int = 0
    #: Prompt tokens the continuous engine prefilled, those its prefix cache held, and those it computed (set by
    #: the worker thread after each step).
    prompt_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    prompt_tokens_computed: int = 0
    #: Prefill forwards the continuous engine ran, and those at the prompts' own shape (eager, past the bucketed
    #: forwards' width).
    prefill_forwards: int = 0
    prefill_forwards_unbucketed: int = 0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    #: Rows in the decoder now (set by the worker thread).
    rows_running: int = 0
    #: CUDA graphs the continuous engine holds, and the seconds its warm-up took (set by the worker thread): a
    #: count that grows while requests run means requests waited for captures.
    cuda_graphs: int = 0
    warm_up_seconds: float = 0.0
    #: Graphs torch.compile built and attention-kernel variants Triton compiled in the engine's process (set by
    #: the worker thread; -1: not countable here): as with the graphs, growth while requests run is waiting.
    compiles: int = 0
    #: Seconds the continuous engine spent in prefills (joins) and in decode steps (set by the worker thread).
    prefill_seconds: float = 0.0
    step_seconds: float = 0.0
    #: CPU seconds of the decode worker thread (set by the worker after each of its turns). With the event loop's
    #: and the process's (read when rendering), it shows what host work a request and a step cost, and how
    #: close the two threads that share the GIL are to filling it.
    worker_cpu_seconds: float = 0.0
    #: An engine process's requests waiting, from its latest snapshot (:meth:`apply_worker_snapshot`).
    worker_queue_depth: int = 0
    #: Requests an engine process's decoder failed (the server's own count is ``failed_requests``).
    worker_failed_requests: int = 0
    #: The scheduler runs in an engine process (its CPU seconds are not this process's).
    engine_process: bool = False
    _worker_rates: tuple[float, float] | None = None   # an engine process's (tokens/s, rows a step)
    _recent: deque = field(default_factory=deque)   # (time, tokens, rows) of the steps in the window
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_step(self, rows: int, tokens: int, seconds: float, *, failed: int = 0) -> None:
        """One decoder step over ``rows`` rows that committed ``tokens`` tokens (``failed``: requests it failed)."""
        now = time.monotonic()
        with self._lock:
            self.steps += 1
            self.step_rows += rows
            self.failed_requests += failed
            self.generated_tokens += tokens
            self.decode_seconds += seconds
            self._recent.append((now, tokens, rows))
            while self._recent and now - self._recent[0][0] > RATE_WINDOW_S:
                self._recent.popleft()

    def worker_snapshot(self, *, queue_depth: int) -> dict[str, float]:
        """The counters and gauges a worker keeps, for an engine process to send to the server (its decoder's
        failed requests as ``worker_failed_requests``)."""
        with self._lock:
            snapshot = {name: getattr(self, name) for name in (*WORKER_COUNTERS, *WORKER_GAUGES)}
        snapshot.update(worker_failed_requests=self.failed_requests, worker_queue_depth=queue_depth,
                        tokens_per_second=self.tokens_per_second(), rows_per_step=self.rows_per_step())
        return snapshot

    def worker_totals(self) -> dict[str, float]:
        """The worker counters now: what a new engine process's counters add to (a server restarted in-process)."""
        with self._lock:
            return {name: getattr(self, name) for name in WORKER_COUNTERS}

    def apply_worker_snapshot(self, snapshot: dict[str, float], base: dict[str, float]) -> None:
        """Take an engine process's counters (:meth:`worker_snapshot`) as this server's, each added to ``base``
        (:meth:`worker_totals` when that process started)."""
        with self._lock:
            for name in WORKER_COUNTERS:
                setattr(self, name, base[name] + snapshot[name])
            for name in WORKER_GAUGES:
                setattr(self, name, snapshot[name])
            self._worker_rates = (snapshot["tokens_per_second"], snapshot["rows_per_step"])

    def record_stream_error(self) -> None:
        with self._lock:
            self.stream_errors += 1

    def tokens_per_second(self) -> float:
        with self._lock:
            if self._worker_rates is not None:
                return self._worker_rates[0]
            if not self._recent:
                return 0.0
            span = max(time.monotonic() - self._recent[0][0], 1.0)
            return sum(t for _, t, _ in self._recent) / span

    def rows_per_step(self) -> float:
        """Mean rows of the steps in the window (0 with none)."""
        with self._lock:
            if self._worker_rates is not None:
                return self._worker_rates[1]
            if not self._recent:
                return 0.0
            return sum(r for _, _, r in self._recent) / len(self._recent)

    def render(self, *, queue_depth: int, model: str, statuses: Mapping[int, int]) -> str:
        """The counters; ``statuses``: responses by HTTP status (the server's Guard counts every one). Called on
        the event loop's thread, whose CPU time it reads."""
        label = f'model="{model}"'

        def metric(name: str, kind: str, text: str, value: object) -> list[str]:
            return [f"# HELP textwm_{name} {text}", f"# TYPE textwm_{name} {kind}", f"textwm_{name}{{{label}}} {value}"]

        lines = [
            *metric("requests_total", "counter", "Completion requests received (chat and legacy).", self.requests),
            "# HELP textwm_request_errors_total Requests answered with an error status.",
            "# TYPE textwm_request_errors_total counter",
        ]
        lines += [f'textwm_request_errors_total{{{label},status="{s}"}} {n}' for s, n in sorted(statuses.items())
                  if s >= 400]
        lines += [
            *metric("stream_errors_total", "counter", "Streams ended by an error event after they started.",
                    self.stream_errors),
            *metric("failed_requests_total", "counter", "Requests failed by a decoder error.",
                    self.failed_requests + self.worker_failed_requests),
            *metric("worker_errors_total", "counter", "Worker faults outside the decoder (logged).", self.worker_errors),
            *metric("anchored_requests_total", "counter", "Requests with a response_template.",
                    self.anchored_requests),
            *metric("prompt_tokens_total", "counter", "Prompt tokens prefilled by the continuous engine.",
                    self.prompt_tokens),
            *metric("prefix_cache_hit_tokens_total", "counter", "Prompt tokens whose K/V the prefix cache held.",
                    self.prefix_cache_hit_tokens),
            *metric("prompt_tokens_computed_total", "counter", "Prompt tokens the prefills computed.",
                    self.prompt_tokens_computed),
            *metric("prefill_forwards_total", "counter", "Prefill forwards the continuous engine ran.",
                    self.prefill_forwards),
            *metric("prefill_forwards_unbucketed_total", "counter",
                    "Prefill forwards at the prompts' own shape (eager: wider than a bucketed forward).",
                    self.prefill_forwards_unbucketed),
            *metric("queue_depth", "gauge", "Requests waiting for the decoder.", queue_depth),
            *metric("rows_running", "gauge", "Rows in the decoder now (batch occupancy).", self.rows_running),
            *metric("decode_steps_total", "counter", "Decoder steps run (batch scheduler: batches).", self.steps),
            *metric("step_rows_total", "counter", "Rows over all steps (mean rows a step = rows / steps).",
                    self.step_rows),
            *metric("rows_per_step", "gauge", f"Mean rows a step over the last {RATE_WINDOW_S:.0f} s.",
                    f"{self.rows_per_step():.2f}"),
            *metric("cuda_graphs", "gauge", "CUDA graphs the continuous engine has captured.", self.cuda_graphs),
            *metric("compiles", "gauge", "Graphs torch.compile built and attention-kernel variants compiled in the "
                    "engine's process (-1: not countable).", self.compiles),
            *metric("warm_up_seconds", "gauge", "Seconds the engine's warm-up took before serving.",
                    f"{self.warm_up_seconds:.3f}"),
            *metric("prefill_seconds_total", "counter", "Seconds the continuous engine spent prefilling joining rows.",
                    f"{self.prefill_seconds:.3f}"),
            *metric("step_seconds_total", "counter", "Seconds the continuous engine spent in decode steps.",
                    f"{self.step_seconds:.3f}"),
            *metric("event_loop_cpu_seconds_total", "counter", "CPU seconds of the event loop's thread (HTTP, "
                    "detokenising).", f"{time.thread_time():.3f}"),
            *metric("decode_worker_cpu_seconds_total", "counter", "CPU seconds of the decode worker thread.",
                    f"{self.worker_cpu_seconds:.3f}"),
            *metric("process_cpu_seconds_total", "counter", "CPU seconds of the server process, all threads.",
                    f"{time.process_time():.3f}"),
            *metric("engine_process", "gauge", "1 when the decode worker is an engine process of its own (its CPU "
                    "seconds are then not the server process's).", int(self.engine_process)),
            *metric("generated_tokens_total", "counter", "Completion tokens generated.", self.generated_tokens),
            *metric("decode_seconds_total", "counter", "Seconds spent in the decoder.", f"{self.decode_seconds:.3f}"),
            *metric("tokens_per_second", "gauge", f"Generated tokens per second over the last {RATE_WINDOW_S:.0f} s.",
                    f"{self.tokens_per_second():.2f}"),
        ]
        return "\n".join(lines) + "\n"
