"""The block layout and KV cache both SDAR rule sets decode over (:mod:`textwm.generation.sdar`,
:mod:`textwm.generation.sdar_lmdeploy`).

Each row is left-padded by a multiple of the block length so that every row's first generation block
starts at the same column; padding keys are masked out, so a row's tokens do not depend on the other
rows of its batch. Finished rows leave the batch (and the cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from textwm.generation.base import MaskDecoder, grow_kv_buffers


class BlockKVCache:
    """Preallocated K/V buffers ``[R, H_kv, T, D]`` per layer holding the committed blocks.

    transformers' attention layers call :meth:`update` with the new K/V and attend over what it
    returns. Writes land right after the committed prefix; only :meth:`commit` moves the
    prefix forward, so a scratch forward's K/V are simply overwritten by the next forward — no
    copies and no cropping.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.length = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        grow_kv_buffers(self.keys, self.values, key_states, value_states, layer_idx, self.capacity)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: {end} > capacity {self.capacity}")
        self.keys[layer_idx][:, :, self.length:end] = key_states
        self.values[layer_idx][:, :, self.length:end] = value_states
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def commit(self, num_tokens: int) -> None:
        """Keep the K/V written by the last forward (``num_tokens`` of them)."""
        self.length += num_tokens

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` of the batch (finished rows leave)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]


class BlockBatch:
    """The rows of one ``generate`` call laid out in columns over one :class:`BlockKVCache` (both rule sets).

    Row ``i`` is left-padded by ``pad[i]`` (a multiple of the block length) so that every row's first
    generation block starts at column ``start``; padding keys are masked out, so a row's tokens do not
    depend on the other rows. ``col0`` is the column of the block being decoded, ``rows`` the original
    index of each row still decoding; rows that finish leave (:meth:`keep`).

    Args:
        prompts: token ids per row (non-empty).
        budgets: ``[n]`` max new tokens per row; a row ends at the first block boundary at or after
            ``prompt_len + budget`` (``end_pos``).
    """

    def __init__(self, decoder: MaskDecoder, prompts: Sequence[Sequence[int]], block_length: int,
                 budgets: torch.Tensor):
        self.decoder, self.prompts, self.blk = decoder, prompts, block_length
        dev, blk = decoder.device, block_length
        lengths = torch.tensor([len(p) for p in prompts])
        self.full_blocks = lengths // blk                             # [n] whole prompt blocks (prefilled)
        self.start = int(self.full_blocks.max()) * blk
        end_pos = (lengths + budgets + blk - 1) // blk * blk
        n_blocks = int(((end_pos - self.full_blocks * blk) // blk).max())
        self.cache = BlockKVCache(capacity=self.start + n_blocks * blk)
        self.pad = (self.start - self.full_blocks * blk).to(dev)    # [R] left padding
        self.end_pos = end_pos.to(dev)                                # [R]
        self.lengths = lengths.to(dev)                                # [R] prompt lengths
        self.rows = torch.arange(len(prompts), device=dev)            # [R] original row index
        self.col0 = self.start

    def positions(self) -> torch.Tensor:
        """``[R, blk]`` position ids of the current block (a row's first prompt token is position 0)."""
        return self.col0 - self.pad[:, None] + torch.arange(self.blk, device=self.pad.device)[None, :]

    def first_block(self) -> torch.Tensor:
        """``[n, blk]`` each row's first generation block: its prompt's tail (kept), then masks."""
        block = torch.full((len(self.prompts), self.blk), self.decoder.mask_id, dtype=torch.long,
                           device=self.pad.device)
        for i, p in enumerate(self.prompts):
            tail = p[int(self.full_blocks[i]) * self.blk:]
            block[i, :len(tail)] = torch.tensor(tail, dtype=torch.long, device=block.device)
        return block

    def prefill(self, first_block: torch.Tensor | None = None) -> torch.Tensor | None:
        """Write and commit the full prompt blocks' K/V (block-causal mask, bidirectional inside a block).

        With ``first_block [n, blk]`` the same forward also runs that block as a scratch forward (its K/V
        are not committed) and its logits ``[n, blk, V]`` are returned, as lmdeploy's prefill does.
        """
        width = self.start + (self.blk if first_block is not None else 0)
        if width == 0:
            return None
        dev, blk = self.pad.device, self.blk
        ids = torch.full((len(self.prompts), width), self.decoder.pad_id, dtype=torch.long, device=dev)
        for i, p in enumerate(self.prompts):
            k = int(self.full_blocks[i]) * blk
            ids[i, self.start - k:self.start] = torch.tensor(p[:k], dtype=torch.long, device=dev)
        if first_block is not None:
            ids[:, self.start:] = first_block
        col = torch.arange(width, device=dev)
        key_ok = col[None, :] >= self.pad[:, None]                                        # [n, W]
        mask = key_ok[:, None, :] & (col[None, :, None] // blk >= col[None, None, :] // blk)
        mask |= torch.eye(width, dtype=torch.bool, device=dev)[None] & ~key_ok[:, :, None]  # padding sees itself
        logits = self.decoder._forward(ids, (col[None, :] - self.pad[:, None]).clamp(min=0), mask[:, None],
                                       self.cache)
        self.cache.commit(self.start)
        return logits[:, self.start:] if first_block is not None else None

    def forward(self, block: torch.Tensor) -> torch.Tensor:
        """Scratch forward of the current block ``[R, blk]`` over the committed cache: logits ``[R, blk, V]``."""
        key_ok = torch.arange(self.col0 + self.blk, device=block.device)[None, :] >= self.pad[:, None]
        mask = key_ok[:, None, None, :].expand(-1, 1, self.blk, -1)
        return self.decoder._forward(block, self.positions(), mask, self.cache)

    def commit(self, block: torch.Tensor) -> None:
        """The commit forward: write the finished block's K/V into the cache and move to the next block."""
        self.forward(block)
        self.cache.commit(self.blk)
        self.col0 += self.blk

    def keep(self, keep: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Keep the rows where ``keep [R]`` is true (in the cache and here); ``tensors`` (``[R, ...]``) likewise."""
        idx = keep.nonzero(as_tuple=True)[0]
        self.cache.select_rows(idx)
        self.rows, self.pad, self.end_pos, self.lengths = (
            t[idx] for t in (self.rows, self.pad, self.end_pos, self.lengths))
        return tuple(t[idx] for t in tensors)
