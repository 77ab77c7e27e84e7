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

    def _generate_rules(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                        budgets: torch.Tensor) -> list[Generation]:
        """JetAstra/SDAR ``generate.py`` rules (module docstring)."""
        self.spec.require_diffusion(settings.block_length)
        blk, dev = settings.block_length, self.device
        schedule = transfer_schedule(blk, settings.denoising_steps)
        gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
        n = len(prompts)
        batch = BlockBatch(self, prompts, blk, budgets)
        results = [Generation(token_ids=[], finish_reason="length") for _ in range(n)]
        batch.prefill()
        forwards = torch.full((n,), 1 if batch.start > 0 else 0, dtype=torch.long)
        block = batch.first_block()
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
            hit_stop = (torch.isin(block, stop_ids) & generated).any(dim=-1)
            reached_end = positions[:, -1] + 1 >= batch.end_pos
            for r, orig in enumerate(batch.rows.tolist()):
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
        for res, f in zip(results, forwards.tolist()):
            res.num_forwards = f
        return results


def expected_blocks(prompt_len: int, gen_length: int, block_length: int) -> int:
    """Generation blocks decoded for a prompt when no stop id appears (used in tests and docs)."""
    return math.ceil((prompt_len + gen_length) / block_length) - prompt_len // block_length
