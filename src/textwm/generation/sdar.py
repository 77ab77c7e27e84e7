"""Batched SDAR block-diffusion decoding with a KV cache of finished blocks.

Semantics (JetAstra/SDAR ``block_diffusion_generate``, REFERENCE.md "SDAR"), per prompt:

* positions start at 0 on the first prompt token; blocks of ``block_length`` start at position 0;
* the full prompt blocks are prefilled into the cache with the block-causal mask (bidirectional
  inside a block); the first generation block holds the prompt's tail, which is kept;
* each block: up to ``denoising_steps`` *scratch* forwards (the block attends to the cache and to
  itself; its K/V are not kept), filling masks by the remasking strategy, then one *commit*
  forward that writes the finished block's K/V into the cache;
* generation ends at the first block boundary at or after ``prompt_len + gen_length``, or after a
  block that contains a stop id; the output is the generated tokens up to the first stop id.

Batching: each row is left-padded by a multiple of the block length so that every row's first
generation block starts at the same column; padding keys are masked out, so a row's tokens do
not depend on the other rows of its batch. Finished rows leave the batch (and the cache).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from textwm.generation.base import MaskDecoder, grow_kv_buffers
from textwm.generation.remasking import select_transfer, transfer_schedule
from textwm.generation.sampling import apply_repetition_penalty, entropy, sample
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

log = logging.getLogger(__name__)


@dataclass
class Generation:
    token_ids: list[int]
    #: "stop" (a stop id was generated) or "length" (gen_length reached).
    finish_reason: str
    #: Model forward passes this row took part in (prefill, scratch and commit forwards).
    num_forwards: int = 0


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


class SDARDecoder(MaskDecoder):
    """Block-diffusion decoder over a loaded SDAR model (any transformers causal LM class)."""

    family = "sdar"

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.stop_ids = torch.tensor(spec.stop_ids or (), dtype=torch.long)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: BlockKVCache) -> torch.Tensor:
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                         use_cache=True)
        return out.logits

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        """Decode one continuation per prompt (token ids, chat template already applied).

        Args:
            gen_lengths: per-row ``gen_length`` (a server batches requests with different
                ``max_tokens``); default ``settings.gen_length`` for every row.
        """
        if not prompts:
            return []
        if gen_lengths is not None and (len(gen_lengths) != len(prompts) or min(gen_lengths) < 1):
            raise ValueError("gen_lengths must give a positive length for every prompt")
        self.spec.require_diffusion(settings.block_length)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: block diffusion needs at least one prompt token")
        blk, dev = settings.block_length, self.device
        schedule = transfer_schedule(blk, settings.denoising_steps)
        gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
        n = len(prompts)
        lengths = torch.tensor([len(p) for p in prompts])
        full_blocks = lengths // blk
        start = int(full_blocks.max()) * blk                       # column of every row's first generation block
        pad = (start - full_blocks * blk).to(dev)                  # left padding per row (a multiple of blk)
        budget = torch.tensor(gen_lengths) if gen_lengths is not None else torch.full((n,), settings.gen_length)
        end_pos = ((lengths + budget + blk - 1) // blk * blk).to(dev)  # position where each row ends
        n_blocks = int(((end_pos.cpu() - full_blocks * blk) // blk).max())
        cache = BlockKVCache(capacity=start + n_blocks * blk)
        results = [Generation(token_ids=[], finish_reason="length") for _ in range(n)]
        lengths = lengths.to(dev)

        # Prefill the full prompt blocks with the block-causal mask.
        if start > 0:
            ids = torch.full((n, start), self.pad_id, dtype=torch.long, device=dev)
            for i, p in enumerate(prompts):
                k = int(full_blocks[i]) * blk
                ids[i, start - k:] = torch.tensor(p[:k], device=dev)
            col = torch.arange(start, device=dev)
            key_ok = col[None, :] >= pad[:, None]                                          # [n, S]
            mask = key_ok[:, None, :] & (col[None, :, None] // blk >= col[None, None, :] // blk)
            mask |= torch.eye(start, dtype=torch.bool, device=dev)[None] & ~key_ok[:, :, None]  # padding sees itself
            self._forward(ids, (col[None, :] - pad[:, None]).clamp(min=0), mask[:, None], cache)
            cache.commit(start)
        forwards = torch.full((n,), 1 if start > 0 else 0, dtype=torch.long)

        # The first generation block holds each prompt's tail; the rest is masks.
        block = torch.full((n, blk), self.mask_id, dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            tail = p[int(full_blocks[i]) * blk:]
            block[i, :len(tail)] = torch.tensor(tail, dtype=torch.long, device=dev)
        penalize = settings.repetition_penalty != 1.0
        vocab = self.model.get_output_embeddings().weight.shape[0]
        seen = torch.zeros((n, vocab if penalize else 1), dtype=torch.bool, device=dev)  # context tokens per row
        if penalize:
            for i, p in enumerate(prompts):
                seen[i, torch.tensor(p, device=dev)] = True
        rows = torch.arange(n, device=dev)                         # original index of each active row
        stop_ids = self.stop_ids.to(dev)
        col0 = start
        while rows.numel():
            positions = col0 - pad[:, None] + torch.arange(blk, device=dev)[None, :]      # [R, blk]
            key_ok = torch.arange(col0 + blk, device=dev)[None, :] >= pad[:, None]        # [R, K]
            mask = key_ok[:, None, None, :].expand(-1, 1, blk, -1)
            for step_k in schedule:
                is_mask = block == self.mask_id
                if not is_mask.any():
                    break
                logits = self._forward(block, positions, mask, cache)
                forwards[rows.cpu()] += 1
                if penalize:
                    filled = torch.zeros_like(seen).scatter_(1, block, ~is_mask)  # tokens filled in this block
                    logits = apply_repetition_penalty(logits, seen | filled, settings.repetition_penalty)
                logits[..., self.mask_id] = float("-inf")          # the mask token is never produced
                flat = sample(logits.reshape(-1, logits.shape[-1]), temperature=settings.temperature,
                              top_k=settings.top_k, top_p=settings.top_p, generator=gen)
                tokens = flat.tokens.view(block.shape)
                confidence = flat.confidence.view(block.shape)
                ent = (entropy(flat.probs).view(block.shape)
                       if settings.remasking_strategy == "entropy_bounded" else None)
                k = torch.clamp(is_mask.sum(dim=-1), max=step_k)
                transfer = select_transfer(settings.remasking_strategy, is_mask, confidence, k,
                                           confidence_threshold=settings.confidence_threshold, entropy=ent,
                                           entropy_budget=settings.entropy_budget)
                block = torch.where(transfer, tokens, block)
            if (block == self.mask_id).any():
                raise RuntimeError("a block still has masks after its denoising steps (schedule bug)")

            generated = positions >= lengths[:, None]                # the prompt tail is not output
            hit_stop = (torch.isin(block, stop_ids) & generated).any(dim=-1)
            reached_end = positions[:, -1] + 1 >= end_pos
            for r, orig in enumerate(rows.tolist()):
                res = results[orig]
                for tok, is_gen in zip(block[r].tolist(), generated[r].tolist()):
                    if is_gen and res.finish_reason != "stop":
                        if tok in self.spec.stop_ids:
                            res.finish_reason = "stop"
                        else:
                            res.token_ids.append(tok)
            if penalize:
                seen.scatter_(1, block, True)
            keep = ~(hit_stop | reached_end)
            if not keep.any():
                break
            if not keep.all():
                idx = keep.nonzero(as_tuple=True)[0]
                cache.select_rows(idx)
                rows, block, pad, end_pos, lengths, positions, seen = (
                    t[idx] for t in (rows, block, pad, end_pos, lengths, positions, seen))
                key_ok = key_ok[idx]
                mask = key_ok[:, None, None, :].expand(-1, 1, blk, -1)
            self._forward(block, positions, mask, cache)           # commit the finished block's K/V
            forwards[rows.cpu()] += 1
            cache.commit(blk)
            col0 += blk
            block = torch.full((rows.numel(), blk), self.mask_id, dtype=torch.long, device=dev)
        for res, f in zip(results, forwards.tolist()):
            res.num_forwards = f
        return results


def expected_blocks(prompt_len: int, gen_length: int, block_length: int) -> int:
    """Generation blocks decoded for a prompt when no stop id appears (used in tests and docs)."""
    return math.ceil((prompt_len + gen_length) / block_length) - prompt_len // block_length
