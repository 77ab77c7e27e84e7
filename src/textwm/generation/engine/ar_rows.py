"""Left-to-right decoding in the engine: what HF ``generate`` does for the reference
:class:`~textwm.generation.ar.ARDecoder`, one token per row per step.

The prefill's last logits give the first token; each step feeds a row's last token at its position
(causal: ``limit = position + 1``). Sampling is :func:`~textwm.generation.sampling.sample` (HF's order:
repetition penalty over the prompt and output, temperature, top-k, top-p; greedy at temperature 0). A row
ends at a stop id (left out of the output, finish "stop") or after its budget of tokens ("length").
Each row samples by its own request's settings (:func:`~textwm.generation.sampling.sample_rows`).

An anchored row (a response template, :mod:`textwm.generation.engine.anchor_table`) is forced on the host, as
the reference :meth:`ARDecoder.generate_anchored <textwm.generation.ar.ARDecoder.generate_anchored>` forces it:
at an anchor's position the sampled token is replaced by the anchor's, one per step; a slot ends at N tokens, a
stop id, or the next anchor's first token. Its canvas pads a slot that ended early with a stop id, so that
:func:`~textwm.generation.anchors.slots_of` reads its slots as for the diffusion families.
"""

from __future__ import annotations

import torch

from textwm.generation.anchors import Layout
from textwm.generation.base import Generation
from textwm.generation.engine.rows import Rows, RowsContext, Update
from textwm.generation.sampling import apply_repetition_penalty, sample_rows
from textwm.generation.settings import DecodeSettings


class ARRows(Rows):
    """Row state: the last token and its position ``[rows]`` (the next forward's input); budgets. The host keeps
    each row's position too (``host_pos``), so a step's ``kv_len`` needs no device read."""

    def __init__(self, ctx: RowsContext):
        super().__init__(ctx)
        self.last = torch.full((self.max_rows,), ctx.pad_id, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(self.max_rows, dtype=torch.long, device=self.device)
        self.host_pos: dict[int, int] = {}
        self.budgets: dict[int, int] = {}
        #: Anchored rows: their layout and the canvas position their next token is for.
        self.layouts: dict[int, Layout] = {}
        self.cursor: dict[int, int] = {}

    def join(self, slots: list[int], prompts: list[list[int]], budgets: list[int],
             settings: list[DecodeSettings], layouts: list[Layout | None] | None = None) -> list[Update]:
        if layouts is not None and any(layouts) and not self.stop_set:
            raise ValueError("anchored decoding of an AR model needs the checkpoint's stop ids (a slot that ends "
                             "early is closed with one)")
        self.start_rows(slots, settings)
        for slot, layout in zip(slots, layouts or [None] * len(slots)):
            if layout is not None:
                self.layouts[slot], self.cursor[slot] = layout, 0
        idx = torch.tensor(slots, device=self.device)
        for slot, p in zip(slots, prompts):
            self.mark_seen(slot, p)
        logits = self.ctx.prefill(slots, prompts, pad_id=self.ctx.pad_id)               # [n, V]
        self.count_forward(slots)
        self.pos[idx] = torch.tensor([len(p) - 1 for p in prompts], device=self.device)   # _advance moves it on
        self.host_pos.update((slot, len(p) - 1) for slot, p in zip(slots, prompts))
        self.budgets.update(zip(slots, budgets))
        return self._advance(slots, idx, self._sample(logits, idx))

    def reset(self, slot: int) -> None:
        self.pos[slot] = 0
        for table in (self.host_pos, self.budgets, self.layouts, self.cursor):
            table.pop(slot, None)

    def forward_shapes(self) -> list[tuple[int, int]]:
        return [(1, 0)]   # a step feeds each row's last token

    def _sample(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Next token ``[n]`` from ``logits [n, V]`` of engine rows ``rows [n]``."""
        if self.penalize:
            logits = apply_repetition_penalty(logits[:, None], self.seen[rows], self.penalty[rows])[:, 0]
        return sample_rows(logits, self.sampling(self.max_rows).take(rows), generator=self.ctx.generator).tokens

    def step(self) -> list[Update]:
        v = self.view()
        pos = self.pos[:v.b, None]
        kv_len = max(self.host_pos[s] for s in v.rows) + 1
        logits = self.ctx.forward(self.last[:v.b, None], pos, pos, pos + 1, kv_len=kv_len)
        self.count_forward()
        return self._advance(v.rows, v.idx, self._sample(logits[v.idx, 0], v.idx))

    def _advance(self, rows: list[int], idx: torch.Tensor, tokens: torch.Tensor) -> list[Update]:
        """Append each row's new token (``tokens [n]`` on the device, of engine rows ``rows`` / ``idx``); rows at a
        stop id or their budget finish.

        The next forward's inputs move on for every row on the device first, without a host round trip (a
        finishing row's are reset by :meth:`finish`); then the tokens are read, the step's one synchronisation.
        Anchored rows need the sampled tokens on the host first: what they feed is an anchor's token or theirs.
        """
        forced: dict[int, tuple[list[int], str | None]] = {}
        if self.layouts and any(s in self.layouts for s in rows):
            sampled = tokens.tolist()
            fed = []
            for slot, tok in zip(rows, sampled):
                if slot in self.layouts:
                    tok, new, finish = self._anchor_step(slot, tok)
                    forced[slot] = (new, finish)
                fed.append(tok)
            tokens = torch.tensor(fed, device=self.device)
        self.last[idx] = tokens
        self.pos[idx] += 1
        if self.penalize:
            self.seen[idx, tokens] = True     # rows without a penalty have penalty 1: their marks change nothing
        updates = []
        for slot, tok in zip(rows, tokens.tolist()):
            out = self.outputs[slot]
            if slot in forced:
                new, finish = forced[slot]
                out += new
                self.host_pos[slot] += 1
                done = None if finish is None else self.finish(slot, Generation(token_ids=out, finish_reason=finish))
                updates.append((slot, new, done))
                continue
            if tok in self.stop_set:
                updates.append((slot, [], self.finish(slot, Generation(token_ids=out, finish_reason="stop"))))
                continue
            out.append(tok)
            self.host_pos[slot] += 1
            if len(out) >= self.budgets[slot]:
                updates.append((slot, [tok], self.finish(slot, Generation(token_ids=out, finish_reason="length"))))
            else:
                updates.append((slot, [tok], None))
        return updates

    def _anchor_step(self, slot: int, tok: int) -> tuple[int, list[int], str | None]:
        """An anchored row's step, given the token it sampled for its canvas position: the token it feeds next,
        the canvas tokens it adds, and its finish reason once its canvas is done (else None)."""
        layout, c = self.layouts[slot], self.cursor[slot]
        new: list[int] = []
        if layout.fixed[c] is None:                                   # in a slot
            end = next(e for s, e in layout.spans if s <= c < e)
            following = layout.fixed[end] if end < len(layout) else None
            if tok not in self.stop_set and tok != following:
                self.cursor[slot] = c + 1
                return tok, [tok], "length" if c + 1 >= len(layout) else None
            if c >= layout.open_from:                                 # a stop in the open last slot ends the answer
                return tok, [tok], "stop"
            pad = next(iter(self.ctx.spec.stop_ids))
            new, c = [pad] * (end - c), end                           # the slot ends here; the next anchor follows
            if c >= len(layout):
                return tok, new, "stop"
        tok = int(layout.fixed[c])                                    # an anchor's position: forced
        self.cursor[slot] = c + 1
        return tok, [*new, tok], ("stop" if c + 1 >= len(layout) else None)
