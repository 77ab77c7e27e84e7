"""Batched SDAR block-diffusion decoding with a KV cache of finished blocks.

Two rule sets share the layout, the cache and the forwards (:class:`~textwm.generation.sdar_blocks.BlockBatch`):
``settings.sdar_rules == "generate"`` (below) and ``"lmdeploy"`` (lmdeploy's dllm engine, as the paper
served its world models: :mod:`textwm.generation.sdar_lmdeploy`; sdar/README.md compares them).

``generate`` rules (JetAstra/SDAR ``block_diffusion_generate``), per prompt:

* positions start at 0 on the first prompt token; blocks of ``block_length`` start at position 0;
* the full prompt blocks are prefilled into the cache with the block-causal mask (bidirectional
  inside a block); the first generation block holds the prompt's tail, which is kept;
* each block: up to ``denoising_steps`` *scratch* forwards (the block attends to the cache and to
  itself; its K/V are not kept), filling masks by the remasking strategy, then one *commit*
  forward that writes the finished block's K/V into the cache;
* generation ends at the first block boundary at or after ``prompt_len + gen_length``, or after a
  block that contains a stop id; the output is the generated tokens up to the first stop id.

Batching (both rule sets): each row is left-padded by a multiple of the block length so that every
row's first generation block starts at the same column; padding keys are masked out, so a row's tokens
do not depend on the other rows of its batch. Finished rows leave the batch (and the cache).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from textwm.generation.anchors import AnchoredAnswer, Layout, answer, slots_of
from textwm.generation.base import Generation, MaskDecoder
from textwm.generation.remasking import select_transfer, transfer_schedule
from textwm.generation.sampling import apply_repetition_penalty, entropy, sample
from textwm.generation.sdar_blocks import BlockBatch
from textwm.generation.sdar_lmdeploy import generate_lmdeploy
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

log = logging.getLogger(__name__)


class SDARDecoder(MaskDecoder):
    """Block-diffusion decoder over a loaded SDAR model (any transformers causal LM class).

    ``settings.sdar_rules`` picks the rules: ``generate`` (this module) or ``lmdeploy``
    (:mod:`textwm.generation.sdar_lmdeploy`).
    """

    family = "sdar"

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.stop_ids = torch.tensor(spec.stop_ids or (), dtype=torch.long)

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
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: block diffusion needs at least one prompt token")
        budgets = (torch.tensor(list(gen_lengths)) if gen_lengths is not None
                   else torch.full((len(prompts),), settings.gen_length))
        if settings.sdar_rules == "lmdeploy":
            return generate_lmdeploy(self, prompts, settings, budgets)
        return self._generate_rules(prompts, settings, budgets)

    @torch.no_grad()
    def generate_anchored(self, prompts: Sequence[Sequence[int]], layouts: Sequence[Layout],
                          settings: DecodeSettings, decode: Any) -> list[AnchoredAnswer]:
        """Fill each row's template (:mod:`textwm.generation.anchors`) under the ``generate`` rules.

        Every anchor token is placed in its block before the block's first forward and, not being a mask, is
        never remasked: each slot is denoised with the anchors on both of its sides in view. A stop id ends the
        answer only inside an open last slot; in a closed slot it ends that slot's content. ``decode``: token
        ids -> text (the tokenizer's).
        """
        if settings.sdar_rules != "generate":
            raise ValueError(f"anchored decoding runs under the generate rules, not sdar_rules="
                             f"{settings.sdar_rules!r}")
        if len(layouts) != len(prompts) or any(len(layout) == 0 for layout in layouts):
            raise ValueError("every prompt needs a non-empty layout")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: block diffusion needs at least one prompt token")
        rows = self._generate_rules(prompts, settings, torch.tensor([len(layout) for layout in layouts]),
                                    layouts=layouts)
        out = []
        for layout, row in zip(layouts, rows):
            slots, finish = slots_of(layout, row.token_ids, self.spec.stop_ids or ())
            out.append(answer(layout, slots, decode, finish, row.num_forwards))
        return out

    def _generate_rules(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                        budgets: torch.Tensor, layouts: Sequence[Layout] | None = None) -> list[Generation]:
        """JetAstra/SDAR ``generate.py`` rules (module docstring). With ``layouts`` (anchored decoding), each
        row's token_ids are its whole canvas: stop ids included, cut only by a stop in its open last slot."""
        self.spec.require_diffusion(settings.block_length)
        blk, dev = settings.block_length, self.device
        schedule = transfer_schedule(blk, settings.denoising_steps)
        gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
        n = len(prompts)
        batch = BlockBatch(self, prompts, blk, budgets)
        results = [Generation(token_ids=[], finish_reason="length") for _ in range(n)]
        batch.prefill()
        forwards = torch.full((n,), 1 if batch.start > 0 else 0, dtype=torch.long)
        anchors = _AnchorCanvas(layouts, self.spec.stop_ids or (), dev) if layouts is not None else None
        block = batch.first_block()
        if anchors is not None:
            block = anchors.place(block, batch)
        penalize = settings.repetition_penalty != 1.0
        vocab = self.model.get_output_embeddings().weight.shape[0]
        seen = torch.zeros((n, vocab if penalize else 1), dtype=torch.bool, device=dev)  # context tokens per row
        if penalize:
            for i, p in enumerate(prompts):
                seen[i, torch.tensor(p, device=dev)] = True
        stop_ids = self.stop_ids.to(dev)
        while True:
            for step_k in schedule:
                is_mask = block == self.mask_id
                if not is_mask.any():
                    break
                logits = batch.forward(block)
                forwards[batch.rows.cpu()] += 1
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

            positions = batch.positions()
            generated = positions >= batch.lengths[:, None]           # the prompt tail is not output
            if anchors is not None:
                hit_stop = (torch.isin(block, stop_ids) & anchors.in_open_slot(batch)).any(dim=-1)
                anchors.collect(block, batch, results)
            else:
                hit_stop = (torch.isin(block, stop_ids) & generated).any(dim=-1)
            reached_end = positions[:, -1] + 1 >= batch.end_pos
            for r, orig in enumerate(batch.rows.tolist() if anchors is None else ()):
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
                block, seen = batch.keep(keep, block, seen)
            batch.commit(block)                                        # commit the finished block's K/V
            forwards[batch.rows.cpu()] += 1
            block = torch.full((batch.rows.numel(), blk), self.mask_id, dtype=torch.long, device=dev)
            if anchors is not None:
                block = anchors.place(block, batch)
        for res, f in zip(results, forwards.tolist()):
            res.num_forwards = f
        return results


class _AnchorCanvas:
    """The rows' layouts as tensors, indexed by original row: ``fixed [N, L]`` (a token id, or -1 where a slot
    is and past a row's end), ``length [N]`` and ``open_from [N]`` (where a stop id may end the row)."""

    def __init__(self, layouts: Sequence[Layout], stop_ids: Sequence[int], dev: torch.device):
        width = max(len(layout) for layout in layouts)
        fixed = torch.full((len(layouts), width), -1, dtype=torch.long)
        for i, layout in enumerate(layouts):
            fixed[i, :len(layout)] = torch.tensor([-1 if t is None else t for t in layout.fixed])
        self.fixed = fixed.to(dev)
        self.length = [len(layout) for layout in layouts]
        self.open_from = torch.tensor([layout.open_from for layout in layouts], device=dev)
        self.length_t = torch.tensor(self.length, device=dev)
        self.stop_ids = set(stop_ids)

    @staticmethod
    def _offsets(batch: BlockBatch) -> torch.Tensor:
        """Answer positions ``[R, B]`` of the current block's columns (negative in the prompt tail)."""
        return batch.positions() - batch.lengths[:, None]

    def place(self, block: torch.Tensor, batch: BlockBatch) -> torch.Tensor:
        """``block [R, B]`` with the anchor tokens written at their answer positions (masks until now)."""
        offsets = self._offsets(batch)
        fixed = self.fixed[batch.rows]
        inside = (offsets >= 0) & (offsets < fixed.shape[1])
        tokens = fixed.gather(1, offsets.clamp(0, fixed.shape[1] - 1))
        return torch.where(inside & (tokens >= 0), tokens, block)

    def in_open_slot(self, batch: BlockBatch) -> torch.Tensor:
        """``[R, B]``: the columns where a stop id ends the row (its open last slot)."""
        offsets = self._offsets(batch)
        return (offsets >= self.open_from[batch.rows][:, None]) & (offsets < self.length_t[batch.rows][:, None])

    def collect(self, block: torch.Tensor, batch: BlockBatch, results: list[Generation]) -> None:
        """Append each row's canvas tokens of this block: up to its layout's end, and in its open slot up to
        and including a stop id (the row then ends)."""
        offsets = self._offsets(batch)
        for r, orig in enumerate(batch.rows.tolist()):
            res = results[orig]
            open_from = int(self.open_from[orig])
            for tok, offset in zip(block[r].tolist(), offsets[r].tolist()):
                if res.finish_reason == "stop" or not 0 <= offset < self.length[orig]:
                    continue
                res.token_ids.append(tok)
                if offset >= open_from and tok in self.stop_ids:
                    res.finish_reason = "stop"


def expected_blocks(prompt_len: int, gen_length: int, block_length: int) -> int:
    """Generation blocks decoded for a prompt when no stop id appears (used in tests and docs)."""
    return math.ceil((prompt_len + gen_length) / block_length) - prompt_len // block_length
