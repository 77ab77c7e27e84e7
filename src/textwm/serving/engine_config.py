"""The serving engine's settings (a light module: the engine process receives them before it loads torch)."""

from __future__ import annotations

from dataclasses import dataclass

from textwm.generation.settings import DecodeSettings

SCHEDULERS = ("auto", "continuous", "batch")


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
    #: The continuous scheduler and the model in a child process (:mod:`textwm.serving.engine_process`), so that
    #: the decode steps and the event loop do not share one GIL; False: a thread of the server's process.
    engine_process: bool = False

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        for name in ("max_batch_size", "max_queue", "max_stop_strings", "max_stop_chars", "max_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
