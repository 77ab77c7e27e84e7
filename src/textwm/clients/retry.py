"""Bounded retries with exponential backoff and jitter, within one deadline per request: shared by every client.

A request has one deadline (the client's ``timeout_s``), whatever its retries: each attempt gets the
time that is left, a pause never runs past it, and a read timeout is not retried (the server may
still be working on it: a retry would only multiply its load). Retries happen after connection errors
and transient statuses (502, 503, 504, 429, 408) while time is left.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx

#: HTTP statuses worth retrying: the server is busy, restarting or timed out. Not 500: a server's own fault
#: answers the same request the same way, and retrying it multiplies the load on a failing server.
TRANSIENT_STATUS = frozenset({408, 425, 429, 502, 503, 504})
#: Seconds a client keeps an idle connection for reuse: below every server's idle timeout (uvicorn's default is
#: 5 s, httpx's expiry too: at that boundary a reused connection can be reset with no response).
CLIENT_KEEPALIVE_S = 2.0


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter."""

    # Help strings as plain metadata (textwm.config reads them): this bottom layer imports no config module.
    max_retries: int = field(default=3, metadata={"help": "retries after the first attempt (transient failures only)"})
    backoff_s: float = field(default=0.5, metadata={"help": "seconds before the first retry (doubled each time)"})
    max_backoff_s: float = field(default=8.0, metadata={"help": "longest pause between two attempts"})

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError(f"backoff seconds must be >= 0, got {self.backoff_s} and {self.max_backoff_s}")

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def delay(self, attempt: int) -> float:
        """Sleep before retry number ``attempt`` (1-based)."""
        base = min(self.max_backoff_s, self.backoff_s * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)


class Deadline:
    """The time left for one request, across its attempts."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def timeout(self, connect_s: float = 10.0) -> httpx.Timeout:
        """An httpx timeout for the next attempt: the time left (at least a millisecond)."""
        left = max(self.remaining(), 0.001)
        return httpx.Timeout(left, connect=min(connect_s, left))

    def pause(self, seconds: float) -> float | None:
        """How long to sleep before a retry (never past the deadline); None when no retry fits in the time left."""
        left = self.remaining()
        if left <= 0.05:
            return None
        return min(seconds, left - 0.05)


#: Transport errors after which a retry is worth it: the request did not get an answer because of the
#: connection, not because the server was slow.
def retryable_transport(exc: httpx.TransportError) -> bool:
    return not isinstance(exc, httpx.TimeoutException) or isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout))
