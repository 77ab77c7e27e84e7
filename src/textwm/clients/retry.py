"""Bounded retries with exponential backoff and jitter, shared by every HTTP client."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: HTTP statuses worth retrying: the server is busy, restarting or timed out.
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


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
