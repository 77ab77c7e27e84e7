"""What the engine's family modules share: their context, the active-row set and the bucket they run.

A family's row state lives in tensors of ``max_rows`` rows on the model's device, indexed by engine row
(the slot a request holds). A forward runs rows ``0..B-1`` where ``B`` is the row bucket covering the
highest active row (:func:`~textwm.generation.engine.graphs.row_bucket`); inactive rows in it compute
garbage that is never read (they write only into their own, free, cache rows).

The rows share the structure of a step (``ctx.settings``: block length, steps, strategy, window, ...;
:meth:`DecodeSettings.step_key`) and each samples by its own request's settings: temperature, top-k, top-p
and repetition penalty live in ``[max_rows]`` tensors set when a row joins (:meth:`Rows.start_rows`); the
host keeps which of them the active rows use (:meth:`Rows.sampling`), so an all-greedy step stays one argmax.
The repetition-penalty table ``seen`` is ``[max_rows, V]`` while some active row penalises, else ``[max_rows, 1]``.

Host work per step is what bounds a small model (a 0.6B forward replays in about a millisecond), so the
families keep on the host what their control flow needs (lengths, positions, which rows have a block to
commit) instead of reading it back from the device, reuse the device index of the active rows while the
set does not change (:meth:`Rows.view`), and read a step's results with one transfer (:func:`to_host`):
a step synchronises once, at its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from textwm.generation.base import Generation
from textwm.generation.engine.graphs import GraphedForward, row_bucket
from textwm.generation.engine.prefill import Prefiller
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.sampling import RowParams
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

#: Largest SDAR block length and WeDLM window the cache's slack past max_len covers.
MAX_BLOCK_OR_WINDOW = 64
#: One step's news for one engine row: (row, tokens added to its output, its result if it finished).
Update = tuple[int, list[int], "Generation | None"]


@dataclass(frozen=True)
class ActiveView:
    """The active rows as one forward sees them; rebuilt only when the active set changes."""

    #: The row bucket a forward runs (rows ``0..b-1``).
    b: int
    #: The active engine rows, ascending.
    rows: list[int]
    #: ``[len(rows)]`` long on the device: ``rows``.
    idx: torch.Tensor
    #: ``[b]`` bool on the device: which rows of the bucket decode.
    mask: torch.Tensor


def to_host(*tensors: torch.Tensor) -> list[list[list[int]]]:
    """Several ``[n, k_i]`` integer/bool tensors read in one device-to-host transfer: ``[n][k_i]`` lists each."""
    widths = [t.shape[1] for t in tensors]
    flat = torch.cat([t.long() for t in tensors], dim=1).tolist()   # ints throughout (bools as 0/1)
    out, start = [], 0
    for w in widths:
        out.append([row[start:start + w] for row in flat])
        start += w
    return out


@dataclass
class RowsContext:
    """What a family's row state is built with; ``settings`` gives the step structure (its sampling knobs are
    not used: each row brings its own to :meth:`Rows.join`)."""

    net: StaticModel
    forward: GraphedForward
    spec: ModelSpec
    pad_id: int
    settings: DecodeSettings
    generator: torch.Generator | None
    #: The engine's prefills of joining rows (prefix cache, bucketed graphs).
    prefill: Prefiller


class Rows:
    """Base of the family row states: the active rows, their outputs, forward counts and sampling settings."""

    #: Whether the family applies a repetition penalty (WeDLM's upstream has none).
    applies_penalty = True
    #: The :class:`DecodeSettings` field sizing what one forward decodes (SDAR's ``block_length``, WeDLM's
    #: ``window_size``), at most :data:`MAX_BLOCK_OR_WINDOW`; None: nothing to bound (AR).
    span_setting: str | None = None
    #: Cache columns past ``max_len`` a row may write.
    capacity_slack = 0

    def __init__(self, ctx: RowsContext):
        span = getattr(ctx.settings, self.span_setting) if self.span_setting else None
        if span is not None and span > MAX_BLOCK_OR_WINDOW:
            raise ValueError(f"the engine decodes {self.span_setting} up to {MAX_BLOCK_OR_WINDOW}, got {span}")
        self.ctx, self.settings = ctx, ctx.settings
        self.device = ctx.net.device
        self.max_rows = ctx.net.rows
        self.active: set[int] = set()
        self.outputs: dict[int, list[int]] = {}
        self.forwards: dict[int, int] = {}
        self.stop_ids = torch.tensor(ctx.spec.stop_ids or (), dtype=torch.long, device=self.device)
        self.stop_set = set(ctx.spec.stop_ids or ())
        n, dev = self.max_rows, self.device
        #: Per-row sampling settings [rows] (a free row holds the greedy defaults).
        self.temperature = torch.zeros(n, dtype=torch.float32, device=dev)
        self.top_k = torch.zeros(n, dtype=torch.long, device=dev)
        self.top_p = torch.ones(n, dtype=torch.float32, device=dev)
        self.penalty = torch.ones(n, dtype=torch.float32, device=dev)
        #: The active rows' own settings, and those of them whose repetition penalty is on.
        self.row_settings: dict[int, DecodeSettings] = {}
        self.penalised: set[int] = set()
        #: [rows, V] tokens a row's repetition penalty applies to; [rows, 1] while no active row penalises.
        self.seen = torch.zeros((n, 1), dtype=torch.bool, device=dev)
        self._flags = RowParams.flags([])
        self._view: ActiveView | None = None

    def view(self) -> ActiveView:
        """The active rows, their bucket and device index (cached until a row joins or leaves)."""
        if self._view is None:
            rows = sorted(self.active)
            b = row_bucket(rows[-1] + 1, self.max_rows)
            mask = torch.zeros(b, dtype=torch.bool)
            mask[rows] = True
            # One host-to-device copy for both (a pageable copy waits for the stream).
            both = torch.cat([torch.tensor(rows, dtype=torch.long), mask.long()]).to(self.device)
            self._view = ActiveView(b=b, rows=rows, idx=both[:len(rows)], mask=both[len(rows):].bool())
        return self._view

    def bucket(self) -> tuple[int, torch.Tensor]:
        """``B`` and ``active [B]`` bool: the rows a forward runs now and which of them decode."""
        v = self.view()
        return v.b, v.mask

    @property
    def penalize(self) -> bool:
        """Whether some active row's repetition penalty is on (families without one never set it)."""
        return bool(self.penalised)

    def start_rows(self, slots: list[int], settings: list[DecodeSettings]) -> None:
        """Rows ``slots`` start, each with its request's ``settings`` (their step keys must be the running one)."""
        key = self.settings.step_key()
        for slot, st in zip(slots, settings, strict=True):
            if st.step_key() != key:
                raise ValueError(f"row {slot}: its settings {st} differ from the running rows' step structure "
                                 f"{self.settings}; DecodeEngine.compatible() should have kept it waiting")
        self._view = None
        for slot, st in zip(slots, settings):
            self.active.add(slot)
            self.outputs[slot] = []
            self.forwards[slot] = 0
            self.row_settings[slot] = st
            if self.applies_penalty and st.repetition_penalty != 1.0:
                self.penalised.add(slot)
        idx = torch.tensor(slots, device=self.device)
        values = torch.tensor([[st.temperature, st.top_k if st.temperature > 0 else 0,
                                st.top_p if st.temperature > 0 else 1.0,
                                st.repetition_penalty if slot in self.penalised else 1.0]
                               for slot, st in zip(slots, settings)], dtype=torch.float64).to(self.device)  # one copy
        self.temperature[idx], self.top_p[idx], self.penalty[idx] = (values[:, i].float() for i in (0, 2, 3))
        self.top_k[idx] = values[:, 1].long()
        if self.penalize and self.seen.shape[1] == 1:
            self.seen = torch.zeros((self.max_rows, self.ctx.net.vocab_size), dtype=torch.bool, device=self.device)
        elif self.seen.shape[1] > 1:
            self.seen[idx] = False
        self._refresh()

    def _refresh(self) -> None:
        """Recompute the host-side facts about the active rows' sampling settings."""
        self._flags = RowParams.flags([(st.temperature, st.top_k, st.top_p) for st in self.row_settings.values()])

    def sampling(self, b: int) -> RowParams:
        """The sampling settings of rows ``0..b-1`` (device tensors; flags from the active rows)."""
        return RowParams(temperature=self.temperature[:b], top_k=self.top_k[:b], top_p=self.top_p[:b],
                         **self._flags)

    def count_forward(self, rows: Any = None) -> None:
        for s in (self.active if rows is None else rows):
            self.forwards[s] += 1

    def finish(self, slot: int, result: Generation) -> Generation:
        """Free ``slot`` and return its result (with the forwards it took part in)."""
        result.num_forwards = self.forwards.pop(slot)
        self.active.discard(slot)
        self._view = None
        self.outputs.pop(slot, None)
        self.reset(slot)
        self._free_sampling(slot)
        return result

    def _free_sampling(self, slot: int) -> None:
        """Back to the greedy defaults; the ``seen`` table shrinks when the last penalised row leaves."""
        self.row_settings.pop(slot, None)
        self.penalised.discard(slot)
        for table, rest in ((self.temperature, 0.0), (self.top_k, 0), (self.top_p, 1.0), (self.penalty, 1.0)):
            table[slot:slot + 1].fill_(rest)       # a kernel with the value as its argument: no host copy
        if not self.penalised and self.seen.shape[1] > 1:
            self.seen = torch.zeros((self.max_rows, 1), dtype=torch.bool, device=self.device)
        self._refresh()

    def leave(self, slot: int) -> None:
        """The request in ``slot`` was cancelled."""
        if slot in self.active:
            self.finish(slot, Generation(token_ids=[], finish_reason="length"))

    def reset(self, slot: int) -> None:
        """Return a freed row's state to rest (families override)."""

    def forward_shapes(self) -> list[tuple[int, int]]:
        """``(query length, logits_from)`` of every forward a step of this step structure runs (families say)."""
        raise NotImplementedError

    def check_idle(self) -> None:
        """Placeholder forwards and steps write into rows ``0..B-1``: none may be decoding."""
        if self.active:
            raise RuntimeError("warm the graphs before any row decodes: the placeholder forwards write into rows 0..B-1")

    def warm_graphs(self, buckets: list[int], kv_lens: list[int]) -> None:
        """Capture every forward a step can run, for each row bucket and kv bucket, before any row is active
        (:meth:`GraphedForward.warm`). A family whose steps are graphs of their own overrides it."""
        self.check_idle()
        for b in buckets:
            for kv_len in kv_lens:
                for q, logits_from in self.forward_shapes():
                    self.ctx.forward.warm(b, q, kv_len, logits_from)

    def mark_seen(self, slot: int, tokens: list[int]) -> None:
        """``tokens`` now count for the repetition penalty of ``slot`` (rows without one keep no table)."""
        if slot in self.penalised and tokens:
            self.seen[slot, torch.tensor(tokens, device=self.device)] = True
