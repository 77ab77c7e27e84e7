"""Anchored rows in the engine: each row's response-template canvas (:mod:`textwm.generation.anchors`) on the device.

An anchored row decodes its template's canvas, fixed tokens in place and slots N positions wide, and its output
is that canvas (stop ids included: a stop ends a closed slot's content, or the answer in an open last slot);
:func:`~textwm.generation.anchors.slots_of` reads the slots back, as for the reference decoders. The diffusion
families read the anchors from an :class:`AnchorTable` inside their forwards (SDAR places them in a block before
its first forward, WeDLM enters them into its window as filled slots), so a row without a template is a row of
the table with no anchor and decodes exactly as before. The AR family forces them on the host
(:class:`~textwm.generation.engine.ar_rows.ARRows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from textwm.generation.anchors import Layout

#: The table's value where an answer position has no anchor (a slot, past the canvas, or a row with no template).
NO_ANCHOR = -1


class AnchorTable:
    """``fixed [rows, width]``: the anchor token at each engine row's answer position (:data:`NO_ANCHOR` where none);
    ``prompt_len [rows]``: where a row's answer starts in its sequence. Host side: the rows' layouts."""

    def __init__(self, rows: int, width: int, device: torch.device):
        self.width = width
        self.fixed = torch.full((rows, width), NO_ANCHOR, dtype=torch.long, device=device)
        self.prompt_len = torch.zeros(rows, dtype=torch.long, device=device)
        self.layouts: dict[int, Layout] = {}

    def set_rows(self, slots: Sequence[int], prompt_lens: Sequence[int], layouts: Sequence[Layout | None]) -> None:
        """Rows ``slots`` join with their prompts' lengths and layouts (None: no template)."""
        anchored = [(s, layout) for s, layout in zip(slots, layouts) if layout is not None]
        for slot, layout in anchored:
            if len(layout) > self.width:
                raise ValueError(f"a template of {len(layout)} tokens is wider than the engine's rows ({self.width})")
            self.layouts[slot] = layout
        if not anchored:
            return
        dev = self.fixed.device
        idx = torch.tensor([s for s, _ in anchored], device=dev)
        table = torch.full((len(anchored), self.width), NO_ANCHOR, dtype=torch.long)
        for i, (_, layout) in enumerate(anchored):
            table[i, :len(layout)] = torch.tensor([NO_ANCHOR if t is None else t for t in layout.fixed])
        self.fixed[idx] = table.to(dev)
        self.prompt_len[torch.tensor(slots, device=dev)] = torch.tensor(list(prompt_lens), device=dev)

    def clear(self, slot: int) -> None:
        if self.layouts.pop(slot, None) is not None:
            self.fixed[slot:slot + 1].fill_(NO_ANCHOR)

    def at(self, offsets: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The anchors ``[n, k]`` of engine rows ``rows [n]`` (None: rows ``0..n-1``) at answer positions
        ``offsets [n, k]`` (any values: outside the table, :data:`NO_ANCHOR`). No host read: it runs inside
        captured steps."""
        table = self.fixed[:offsets.shape[0]] if rows is None else self.fixed[rows]
        inside = (offsets >= 0) & (offsets < self.width)
        tokens = table.gather(1, offsets.clamp(0, self.width - 1))
        return torch.where(inside, tokens, NO_ANCHOR)


def collect_canvas(out: list[int], layout: Layout, tokens: Sequence[int], first_offset: int,
                   stop_ids: set[int]) -> bool:
    """Append to ``out`` (a row's canvas so far) the ``tokens`` decoded at answer positions from ``first_offset``:
    those inside the canvas, up to and including a stop id in the open last slot. True when that stop ended the
    row."""
    for j, tok in enumerate(tokens):
        offset = first_offset + j
        if not 0 <= offset < len(layout):
            continue
        out.append(tok)
        if offset >= layout.open_from and tok in stop_ids:
            return True
    return False
