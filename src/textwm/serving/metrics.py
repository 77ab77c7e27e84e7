"""Server counters, rendered in the Prometheus text exposition format (``GET /metrics``)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Window of the tokens/s gauge.
RATE_WINDOW_S = 30.0


@dataclass
class ServerMetrics:
    requests: int = 0
    batches: int = 0
    batch_rows: int = 0
    failed_requests: int = 0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    _recent: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_batch(self, rows: int, tokens: int, seconds: float, *, failed: int = 0) -> None:
        now = time.monotonic()
        with self._lock:
            self.batches += 1
            self.batch_rows += rows
            self.failed_requests += failed
            self.generated_tokens += tokens
            self.decode_seconds += seconds
            self._recent.append((now, tokens))
            while self._recent and now - self._recent[0][0] > RATE_WINDOW_S:
                self._recent.popleft()

    def tokens_per_second(self) -> float:
        with self._lock:
            if not self._recent:
                return 0.0
            span = max(time.monotonic() - self._recent[0][0], 1.0)
            return sum(t for _, t in self._recent) / span

    def render(self, *, queue_depth: int, model: str, statuses: Mapping[int, int]) -> str:
        """The counters; ``statuses``: responses by HTTP status (the server's Guard counts every one)."""
        label = f'model="{model}"'
        lines = [
            "# HELP textwm_requests_total Chat completion requests received.",
            "# TYPE textwm_requests_total counter",
            f"textwm_requests_total{{{label}}} {self.requests}",
            "# HELP textwm_request_errors_total Requests answered with an error status.",
            "# TYPE textwm_request_errors_total counter",
        ]
        lines += [f'textwm_request_errors_total{{{label},status="{s}"}} {n}' for s, n in sorted(statuses.items())
                  if s >= 400]
        lines += [
            "# HELP textwm_queue_depth Requests waiting for the decoder.",
            "# TYPE textwm_queue_depth gauge",
            f"textwm_queue_depth{{{label}}} {queue_depth}",
            "# HELP textwm_batches_total Decoder batches run.",
            "# TYPE textwm_batches_total counter",
            f"textwm_batches_total{{{label}}} {self.batches}",
            "# HELP textwm_batch_rows_total Rows decoded in all batches (mean batch size = rows / batches).",
            "# TYPE textwm_batch_rows_total counter",
            f"textwm_batch_rows_total{{{label}}} {self.batch_rows}",
            "# HELP textwm_generated_tokens_total Completion tokens generated.",
            "# TYPE textwm_generated_tokens_total counter",
            f"textwm_generated_tokens_total{{{label}}} {self.generated_tokens}",
            "# HELP textwm_decode_seconds_total Seconds spent in the decoder.",
            "# TYPE textwm_decode_seconds_total counter",
            f"textwm_decode_seconds_total{{{label}}} {self.decode_seconds:.3f}",
            f"# HELP textwm_tokens_per_second Generated tokens per second over the last {RATE_WINDOW_S:.0f} s.",
            "# TYPE textwm_tokens_per_second gauge",
            f"textwm_tokens_per_second{{{label}}} {self.tokens_per_second():.2f}",
        ]
        return "\n".join(lines) + "\n"
