"""The engine behind the decoders' ``generate(prompts, settings, gen_lengths)`` interface.

:class:`EngineDecoder` sizes a :class:`~textwm.generation.engine.core.DecodeEngine` to the calls it gets:
the KV cache (rows x columns) grows when a call needs more and is kept otherwise, with its CUDA graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textwm.generation.anchors import AnchoredAnswer, Layout, answer, slots_of
from textwm.generation.base import Decoder, Generation
from textwm.generation.engine.core import DecodeEngine
from textwm.generation.engine.graphs import row_bucket
from textwm.generation.engine.static_model import check_architecture
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

#: Cache columns are allocated in multiples of this many tokens.
LEN_STEP = 512


class EngineDecoder(Decoder):
    """A decoder of any family that runs the static-shape engine (``max_rows`` rows at a time)."""

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None, max_rows: int = 128,
                 **engine_kw: Any):
        check_architecture(model)
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.family = spec.family
        self.max_rows, self.engine_kw = max_rows, engine_kw
        self.engine: DecodeEngine | None = None

    def _engine_for(self, rows: int, length: int) -> DecodeEngine:
        rows = row_bucket(min(rows, self.max_rows), self.max_rows)
        e = self.engine
        if e is None or e.max_rows < rows or e.max_len < length:
            self.engine = None          # free the old cache before allocating the new one
            self.engine = DecodeEngine(self.model, self.spec, pad_token_id=self.pad_id,
                                       max_rows=max(rows, e.max_rows if e else 0),
                                       max_len=max(-(-length // LEN_STEP) * LEN_STEP, e.max_len if e else 0),
                                       **self.engine_kw)
        return self.engine

    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        budgets = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * len(prompts)
        length = max(len(p) + b for p, b in zip(prompts, budgets))
        return self._engine_for(len(prompts), length).generate(prompts, settings, gen_lengths)

    def generate_anchored(self, prompts: Sequence[Sequence[int]], layouts: Sequence[Layout],
                          settings: DecodeSettings, decode: Any) -> list[AnchoredAnswer]:
        """Fill each row's template (:mod:`textwm.generation.anchors`), as the family's reference decoder does;
        ``decode``: token ids -> text."""
        if not prompts:
            return []
        length = max(len(p) + len(layout) for p, layout in zip(prompts, layouts))
        rows = self._engine_for(len(prompts), length).generate_anchored(prompts, settings, layouts)
        out = []
        for layout, row in zip(layouts, rows):
            slots, finish = slots_of(layout, row.token_ids, self.spec.stop_ids or ())
            out.append(answer(layout, slots, decode, finish, row.num_forwards))
        return out
