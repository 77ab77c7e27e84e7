"""The decode engine: a fixed set of rows over one static KV cache, which requests join and leave.

:class:`DecodeEngine` owns the model's static cache (:class:`~textwm.generation.engine.static_model.StaticModel`),
its CUDA graphs (:class:`~textwm.generation.engine.graphs.GraphedForward`) and a table of rows. A request
is *admitted* into a free row (:meth:`DecodeEngine.admit`); at the start of the next :meth:`DecodeEngine.step`
its prompt is prefilled and it decodes with the others. One step is one boundary-to-boundary unit of the
family (:mod:`textwm.generation.engine.families`): an SDAR block (all its denoising forwards), a WeDLM window
forward, an AR token. A row that finishes frees its row at once, so the next step can admit another request:
continuous batching. :meth:`DecodeEngine.generate` runs a list of prompts through the same loop.

The rows running together share the structure of a step, :meth:`DecodeSettings.step_key` (the family's
diffusion settings: block length, denoising steps, strategy, thresholds, SDAR rules, window, ...); each row
samples by its own request's temperature, top-k, top-p and repetition penalty and has its own
``max_tokens``, as vLLM's and lmdeploy's per-request sampling params. A request with another step structure
waits until the running rows drain (:meth:`DecodeEngine.compatible`). A seeded request's rows share one
generator seeded by it, so they run only with rows of the same settings. A greedy row's tokens do not depend
on the other rows, whatever those sample; a sampled row's draw does (the rows draw from one random stream, as
in the reference decoders).

Prompts that start the same way share their prefill: a prompt's longest cached prefix is copied into its row and
only the rest is computed (:mod:`textwm.generation.engine.prefix_cache`; ``prefix_cache_tokens=0`` turns it off).
The rest of a join's prompts runs in forwards of bucketed shapes, CUDA graphs where the engine has graphs
(:mod:`textwm.generation.engine.prefill`).

A request may bring a response template's layout (:mod:`textwm.generation.anchors`): its row decodes the
template's canvas, anchors kept (:mod:`textwm.generation.engine.anchor_table`), beside rows without one.

The rules are the reference decoders' (:mod:`textwm.generation.ar`, :mod:`~textwm.generation.sdar` under both
rule sets, :mod:`~textwm.generation.wedlm`), anchored decoding included; their greedy output is the engine's,
token for token (tests/generation/test_engine.py, tests/generation/test_engine_anchored.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from textwm.generation.anchors import Layout
from textwm.generation.base import Generation
from textwm.generation.engine.families import RowsContext, capacity_slack, rows_class
from textwm.generation.engine.graphs import GraphedForward, kv_buckets, row_buckets
from textwm.generation.engine.prefill import Prefiller
from textwm.generation.engine.prefix_cache import BLOCK_TOKENS, PrefixCache, PrefixStats
from textwm.generation.engine.rows import MAX_BLOCK_OR_WINDOW
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec
from textwm.models.families import get_family

#: BLAS libraries the engine can run its GEMMs with (``torch.backends.cuda.preferred_blas_library``).
BLAS_CHOICES = ("auto", "cublas", "cublaslt", "default")


#: The prefix cache's default size cap in tokens (Qwen3-8B: 147 KB of K/V a token, 9.6 GB for 65,536).
DEFAULT_PREFIX_TOKENS = 65536
#: Bucketed prefill forwards hold at most this many tokens (rows x width) and replay CUDA graphs: a GRPO join after
#: its cached prefixes, or a few new prompts joining a small model's rows, cost a replay or a few instead of every
#: layer's launches.
PREFILL_GRAPH_TOKENS = 2048


class EngineFull(RuntimeError):
    """No free row: wait for a step to finish some rows."""


@dataclass
class RowUpdate:
    """What one step did for one request."""

    key: Hashable
    #: Tokens added to the request's output by this step (in order).
    token_ids: list[int]
    #: The request's whole result once it is done (else None); its ``token_ids`` are all the step updates'.
    finished: Generation | None = None


@dataclass
class EngineStats:
    """Where the engine's time went (seconds since it was built; the GPU is synchronised at each boundary)."""

    prefill_s: float = 0.0
    decode_s: float = 0.0
    steps: int = 0
    rows_stepped: int = 0   # sum over steps of the rows decoding (mean occupancy = rows_stepped / steps)
    #: Seconds :meth:`DecodeEngine.warm_up` took (compiling and capturing before the first request).
    warm_up_s: float = 0.0


class DecodeEngine:
    """Static-shape decoding of one loaded model (AR, SDAR or WeDLM by ``spec.family``).

    Args:
        max_rows: rows decoded together (the KV cache is allocated for this many).
        max_len: prompt + max_tokens of any request, in tokens.
        cuda_graphs: replay decode forwards as CUDA graphs (default: when the model is on CUDA and has no
            mixture-of-experts layers, whose routing has data-dependent shapes).
        attention, fused: see :class:`StaticModel`.
        blas: the BLAS library of the engine's GEMMs, set around each :meth:`step` and restored after it (so
            graphs are captured with it): ``auto`` is cuBLASLt on CUDA, which is faster than cuBLAS at the
            decode's thin shapes (1-8 rows a forward: Qwen3-8B SDAR at batch 1, 499 vs 494 tok/s, and as fast or
            faster at batch 32 and 128, scripts/results/README.md); ``default``: whatever the process prefers.
        prefix_cache_tokens: prompt-prefix tokens whose K/V are kept for the next prompts that start the same way
            (:mod:`textwm.generation.engine.prefix_cache`); None: a quarter of the tokens the rows hold, at most
            :data:`DEFAULT_PREFIX_TOKENS`; 0: no prefix cache.
        prefix_block_tokens: the prefix cache's block (an SDAR block length that does not divide it caches nothing).
        prefill_graph_tokens: prefills run in forwards of bucketed shapes of at most this many tokens (rows x
            width), CUDA graphs with graphs (:mod:`textwm.generation.engine.prefill`); wider rows run eagerly; None:
            :data:`PREFILL_GRAPH_TOKENS` where the engine has graphs and the limited kernel, else 0 (eager and
            unpadded: the CPU gains nothing from padding).
    """

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None, max_rows: int = 64,
                 max_len: int = 4096, cuda_graphs: bool | None = None, attention: str = "auto",
                 fused: bool | None = None, blas: str = "auto", prefix_cache_tokens: int | None = None,
                 prefix_block_tokens: int = BLOCK_TOKENS, prefill_graph_tokens: int | None = None):
        rows_class(spec)   # a family the registry knows (else the error names those it does)
        if get_family(spec.family).masked and spec.mask_token_id is None:
            spec.require_diffusion(1)   # raises the explanatory error
        if max_rows < 1 or max_len < 1:
            raise ValueError(f"max_rows and max_len must be >= 1, got {max_rows} and {max_len}")
        if blas not in BLAS_CHOICES:
            raise ValueError(f"blas must be one of {', '.join(BLAS_CHOICES)}, got {blas!r}")
        self.spec, self.max_rows, self.max_len = spec, max_rows, max_len
        self.pad_id = int(pad_token_id if pad_token_id is not None else (spec.pad_token_id or 0))
        self.net = StaticModel(model, rows=max_rows, capacity=max_len + capacity_slack(spec), attention=attention,
                               fused=fused)
        if prefix_cache_tokens is None:
            prefix_cache_tokens = min(max_rows * max_len // 4, DEFAULT_PREFIX_TOKENS)
        self.prefix_cache = None
        if prefix_cache_tokens >= prefix_block_tokens:
            self.prefix_cache = PrefixCache(layers=len(self.net.layers), n_kv=self.net.n_kv,
                                            head_dim=self.net.head_dim, dtype=self.net.dtype, device=self.net.device,
                                            max_blocks=prefix_cache_tokens // prefix_block_tokens,
                                            block_tokens=prefix_block_tokens)
        if cuda_graphs is None:
            cuda_graphs = self.net.device.type == "cuda" and not has_experts(model)
        self.forward = GraphedForward(self.net, enabled=cuda_graphs)
        if prefill_graph_tokens is None:
            prefill_graph_tokens = PREFILL_GRAPH_TOKENS if cuda_graphs and self.net.attention == "limited" else 0
        self.prefill = Prefiller(self.net, self.forward, self.prefix_cache, graph_tokens=prefill_graph_tokens)
        on_cuda = self.net.device.type == "cuda"
        self.blas = None if blas == "default" or not on_cuda else ("cublaslt" if blas == "auto" else blas)
        self._keys: list[Hashable | None] = [None] * max_rows
        self._joining: list[tuple[int, list[int], int, DecodeSettings, Layout | None]] = []
        self._settings: DecodeSettings | None = None
        self._rows: Any = None
        #: Unseeded row states by step structure, kept for the next requests of that structure.
        self._idle_rows: dict[Hashable, Any] = {}
        self.stats = EngineStats()

    # --- requests ------------------------------------------------------------------------------------

    @property
    def num_active(self) -> int:
        return sum(k is not None for k in self._keys)

    @property
    def prompt_stats(self) -> PrefixStats:
        """Prompt tokens prefilled, found in the prefix cache, and computed, since the engine was built."""
        return self.prefill.stats

    @property
    def free_rows(self) -> int:
        return self.max_rows - self.num_active

    def compatible(self, settings: DecodeSettings) -> bool:
        """Can a request with ``settings`` join the rows running now.

        Yes when none run, or when it has their step structure (:meth:`DecodeSettings.step_key`: its own
        sampling settings and ``max_tokens`` may differ); a seeded request, or rows running under a seed, also
        need equal sampling settings (:meth:`DecodeSettings.batch_key`), as they draw from one generator.
        """
        if self.num_active == 0:
            return True
        running = self._settings
        if settings.step_key() != running.step_key():   # the seed is part of it: seeded and unseeded never mix
            return False
        return settings.seed is None or settings.batch_key() == running.batch_key()

    def admit(self, key: Hashable, prompt: Sequence[int], settings: DecodeSettings, max_tokens: int,
              layout: Layout | None = None) -> None:
        """Give a request a row; it is prefilled and decodes from the next :meth:`step`.

        With a ``layout`` (a response template's canvas) the row decodes that canvas, whose length is then its
        ``max_tokens``; its finished ``token_ids`` are the canvas (:func:`~textwm.generation.anchors.slots_of`
        reads the slots).

        Raises:
            EngineFull: no free row.
            ValueError: empty prompt, prompt + max_tokens over ``max_len``, settings not :meth:`compatible`,
                a key already running, or settings the checkpoint cannot decode with.
        """
        if key in self._keys:
            raise ValueError(f"request {key!r} is already decoding")
        if layout is not None:
            max_tokens = len(layout)
        if not prompt:
            raise ValueError("empty prompt: the engine needs at least one prompt token")
        if max_tokens < 1 or len(prompt) + max_tokens > self.max_len:
            raise ValueError(f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) must be within the "
                             f"engine's max_len {self.max_len} (and max_tokens >= 1)")
        if not self.compatible(settings):
            raise ValueError("settings differ from the running rows' step structure (diffusion settings or seed); "
                             "wait until they drain (compatible())")
        slot = next((i for i, k in enumerate(self._keys) if k is None), None)
        if slot is None:
            raise EngineFull(f"all {self.max_rows} rows are decoding")
        if self.num_active == 0:
            self._start(settings)
        self._keys[slot] = key
        self._joining.append((slot, list(prompt), max_tokens, settings, layout))

    def cancel(self, key: Hashable) -> None:
        """Stop decoding ``key`` (its client went away); unknown keys are ignored."""
        if key in self._keys:
            slot = self._keys.index(key)
            self._keys[slot] = None
            self._joining = [j for j in self._joining if j[0] != slot]
            self._rows.leave(slot)

    def reset(self) -> None:
        """Drop every row (after a failed step their state is unknown); the cache and the graphs stay."""
        self._keys = [None] * self.max_rows
        self._joining = []
        self._settings, self._rows = None, None
        self._idle_rows.clear()

    def _start(self, settings: DecodeSettings) -> None:
        """A new step structure (``settings``'s; the rows bring their own sampling settings): the family's row
        state for it (the cache and graphs stay)."""
        self._settings = settings
        if settings.seed is None and settings.step_key() in self._idle_rows:
            # The same step structure again: its rows (and the CUDA graphs they keep) are reused.
            self._rows = self._idle_rows[settings.step_key()]
            return
        gen = None
        if settings.seed is not None:
            gen = torch.Generator(device=self.net.device).manual_seed(settings.seed)
        ctx = RowsContext(net=self.net, forward=self.forward, spec=self.spec, pad_id=self.pad_id,
                          settings=settings, generator=gen, prefill=self.prefill)
        self._rows = rows_class(self.spec)(ctx)
        if gen is None:
            self._idle_rows[settings.step_key()] = self._rows

    # --- decoding ------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self) -> list[RowUpdate]:
        """Prefill the rows admitted since the last step, then decode one unit for every row."""
        with _preferred_blas(self.blas):
            return self._step()

    def _step(self) -> list[RowUpdate]:
        news = []
        if self._joining:
            slots, prompts, budgets, settings, layouts = (list(x) for x in zip(*self._joining))
            self._joining = []
            started = time.perf_counter()
            # AR: the prefill gives each row a token
            news += self._rows.join(slots, prompts, budgets, settings, layouts if any(layouts) else None)
            self._sync()
            self.stats.prefill_s += time.perf_counter() - started
        if self._rows is not None and self._rows.active:
            started = time.perf_counter()
            self.stats.steps += 1
            self.stats.rows_stepped += len(self._rows.active)
            news += self._rows.step()   # ends by reading its outputs on the host: synchronised
            self.stats.decode_s += time.perf_counter() - started
        merged: dict[int, RowUpdate] = {}
        for slot, tokens, finished in news:
            if slot in merged:
                merged[slot].token_ids += tokens
                merged[slot].finished = finished
            else:
                merged[slot] = RowUpdate(key=self._keys[slot], token_ids=list(tokens), finished=finished)
        for slot, update in merged.items():
            if update.finished is not None:
                self._keys[slot] = None
        return list(merged.values())

    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        """Decode one continuation per prompt, ``max_rows`` at a time with continuous refill (offline use).

        The contract of the reference decoders' ``generate``; ``gen_lengths`` gives per-row budgets.
        """
        if gen_lengths is not None and (len(gen_lengths) != len(prompts) or min(gen_lengths, default=1) < 1):
            raise ValueError("gen_lengths must give a positive length for every prompt")
        budgets = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * len(prompts)
        return self._run_all(prompts, settings, budgets, [None] * len(prompts))

    def generate_anchored(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                          layouts: Sequence[Layout]) -> list[Generation]:
        """Decode each prompt's template canvas (offline use): ``token_ids`` are the canvas, anchors in place."""
        if len(layouts) != len(prompts) or any(len(layout) == 0 for layout in layouts):
            raise ValueError("every prompt needs a non-empty layout")
        return self._run_all(prompts, settings, [len(layout) for layout in layouts], list(layouts))

    def _run_all(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings, budgets: list[int],
                 layouts: list[Layout | None]) -> list[Generation]:
        if not prompts:
            return []
        if self.num_active:
            raise RuntimeError("generate() needs an idle engine; it is serving requests")
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"prompt {i} is empty: the engine needs at least one prompt token")
            if len(p) + budgets[i] > self.max_len:
                raise ValueError(f"prompt {i} ({len(p)} tokens) + gen_length {budgets[i]} exceeds the engine's "
                                 f"max_len {self.max_len}")
        results: list[Generation | None] = [None] * len(prompts)
        waiting = list(range(len(prompts)))[::-1]
        try:
            while waiting or self.num_active:
                while waiting and self.free_rows:
                    i = waiting.pop()
                    self.admit(i, prompts[i], settings, budgets[i], layouts[i])
                for update in self.step():
                    if update.finished is not None:
                        results[update.key] = update.finished
        except BaseException:
            self.reset()   # the next call finds an idle engine, not this call's half-decoded rows
            raise
        return results  # type: ignore[return-value]

    def warm_up(self, settings: DecodeSettings, *, every_shape: bool = True) -> None:
        """Compile and capture, before the first request, what it would otherwise wait for (seconds on CUDA).

        First the layer functions, for prefills of one and of two rows (dynamo specialises a size of 1), the
        prefix cache's paths and the decode graphs of the smallest row buckets, by decoding placeholder prompts
        under ``settings``' step structure. With ``every_shape``, then the forward (or whole-step) graph of every row
        bucket and every kv bucket that structure can run (:meth:`Rows.warm_graphs
        <textwm.generation.engine.rows.Rows.warm_graphs>`) and every bucketed prefill's graph
        (:meth:`Prefiller.shapes <textwm.generation.engine.prefill.Prefiller.shapes>`), so that no request waits for
        a capture; requests of another step structure still capture theirs on first
        use. The engine must be idle.
        """
        if self.num_active:
            raise RuntimeError("warm_up() needs an idle engine; it is serving requests")
        started = time.perf_counter()
        settings = dataclasses.replace(settings, gen_length=min(settings.gen_length, 8), seed=None)
        # A long prompt holds whole SDAR blocks and prefix-cache blocks, so that the prefills of one row, of two,
        # and after a cached prefix (its second time) run here too.
        long = max(1, min(2 * MAX_BLOCK_OR_WINDOW + 1, self.max_len - settings.gen_length))
        short, pad = min(3, long), self.pad_id
        for prompts in ([[pad] * short], [[pad] * long], [[pad] * short, [pad] * long]):
            self.generate(prompts, settings)
        if self.prefill.graph_tokens:
            # Those prefills ran as bucketed graphs: the eager prefill of joins wider than a graph compiles here, at
            # two widths for each row count, so that dynamo compiles the width as a dynamic size, not this one.
            with _preferred_blas(self.blas), torch.no_grad():
                for rows in (1, 2):
                    for width in sorted({long, max(1, long - 1)}):
                        self.net.prefill(torch.arange(rows, device=self.net.device) % self.max_rows,
                                         [[pad] * width] * rows)
        if every_shape:
            self._start(settings)
            with _preferred_blas(self.blas), torch.no_grad():
                self._rows.warm_graphs(row_buckets(self.max_rows), kv_buckets(self.net.capacity))
                for rows, width in self.prefill.shapes():
                    self.forward.warm_prefill(rows, width)
            self._sync()
        # The stats describe serving: the warm-up's decoding is counted in warm_up_s alone.
        self.stats = EngineStats(warm_up_s=self.stats.warm_up_s + time.perf_counter() - started)
        self.prefill.stats = PrefixStats()

    @property
    def num_graphs(self) -> int:
        """CUDA graphs captured so far (0 without graphs)."""
        return self.forward.num_graphs

    @property
    def num_compiles(self) -> int:
        """Graphs torch.compile built in this process so far plus the attention kernel's compiled variants: a
        count that grows while requests run means they waited for a compile (-1 where this Triton hides its
        variants)."""
        from torch._dynamo.utils import counters

        from textwm.generation.engine.limited_attention import compiled_variants

        kernels = compiled_variants()
        return -1 if kernels is None else int(counters["stats"]["unique_graphs"]) + kernels

    def _sync(self) -> None:
        if self.net.device.type == "cuda":
            torch.cuda.synchronize(self.net.device)


@contextlib.contextmanager
def _preferred_blas(library: str | None):
    """torch's preferred BLAS library set to ``library`` inside, restored after (None: left as it is)."""
    if library is None:
        yield
        return
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def has_experts(model: Any) -> bool:
    return any("experts" in name for name, _ in model.named_modules())
