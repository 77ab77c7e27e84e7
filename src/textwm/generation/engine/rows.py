"""What the engine's family modules share: their context, the active-row set and the bucket they run.

A family's row state lives in tensors of ``max_rows`` rows on the model's device, indexed by engine row
(the slot a request holds). A forward runs rows ``0..B-1`` where ``B`` is the row bucket covering the
highest active row (:func:`~textwm.generation.engine.graphs.row_bucket`); inactive rows in it compute
garbage that is never read (they write only into their own, free, cache rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from textwm.generation.base import Generation
from textwm.generation.engine.graphs import GraphedForward, row_bucket
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

#: Largest SDAR block length and WeDLM window the cache's slack past max_len covers.
MAX_BLOCK_OR_WINDOW = 64
#: One step's news for one engine row: (row, tokens added to its output, its result if it finished).
Update = tuple[int, list[int], "Generation | None"]


@dataclass
class RowsContext:
    net: StaticModel
    forward: GraphedForward
    spec: ModelSpec
    pad_id: int
    settings: DecodeSettings
    generator: torch.Generator | None


class Rows:
    """Base of the family row states: the active rows, their outputs and forward counts."""

    def __init__(self, ctx: RowsContext):
        s = ctx.settings
        own = {"sdar": ("block_length", s.block_length), "wedlm": ("window_size", s.window_size)}.get(ctx.spec.family)
        if own is not None and own[1] > MAX_BLOCK_OR_WINDOW:
            raise ValueError(f"the engine decodes {own[0]} up to {MAX_BLOCK_OR_WINDOW}, got {own[1]}")
        self.ctx, self.settings = ctx, ctx.settings
        self.device = ctx.net.device
        self.max_rows = ctx.net.rows
        self.active: set[int] = set()
        self.outputs: dict[int, list[int]] = {}
        self.forwards: dict[int, int] = {}
        self.stop_ids = torch.tensor(ctx.spec.stop_ids or (), dtype=torch.long, device=self.device)
        self.stop_set = set(ctx.spec.stop_ids or ())
        penalize = ctx.settings.repetition_penalty != 1.0
        self.penalize = penalize
        #: [rows, V] (or [rows, 1] unused) tokens a row's repetition penalty applies to.
        self.seen = torch.zeros((self.max_rows, ctx.net.vocab_size if penalize else 1), dtype=torch.bool,
                                device=self.device)

    def bucket(self) -> tuple[int, torch.Tensor]:
        """``B`` and ``active [B]`` bool: the rows a forward runs now and which of them decode."""
        b = row_bucket(max(self.active) + 1, self.max_rows)
        active = torch.zeros(b, dtype=torch.bool)
        active[sorted(self.active)] = True
        return b, active.to(self.device)

    def start_rows(self, slots: list[int]) -> None:
        for s in slots:
            self.active.add(s)
            self.outputs[s] = []
            self.forwards[s] = 0
            self.seen[s] = False

    def count_forward(self, rows: Any = None) -> None:
        for s in (self.active if rows is None else rows):
            self.forwards[s] += 1

    def finish(self, slot: int, result: Generation) -> Generation:
        """Free ``slot`` and return its result (with the forwards it took part in)."""
        result.num_forwards = self.forwards.pop(slot)
        self.active.discard(slot)
        self.outputs.pop(slot, None)
        self.reset(slot)
        return result

    def leave(self, slot: int) -> None:
        """The request in ``slot`` was cancelled."""
        if slot in self.active:
            self.finish(slot, Generation(token_ids=[], finish_reason="length"))

    def reset(self, slot: int) -> None:
        """Return a freed row's state to rest (families override)."""

    def mark_seen(self, slot: int, tokens: list[int]) -> None:
        if self.penalize and tokens:
            self.seen[slot, torch.tensor(tokens, device=self.device)] = True
