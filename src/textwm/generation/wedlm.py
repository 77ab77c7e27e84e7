"""Batched WeDLM streaming parallel decoding under causal attention, with a KV cache.

Semantics (REFERENCE.md "WeDLM"; the WeDLM paper's streaming parallel decoding), per prompt:

* the prompt is prefilled with ordinary causal attention (positions from 0);
* a window of ``window_size`` slots follows the committed prefix, at logical positions
  ``P, P+1, ...`` (``P`` = prompt + committed tokens); it starts as masks;
* each step feeds the window's filled slots first, then its masks (each in logical order), every
  slot with its true position id, under causal attention by physical order — the layout the model
  was trained on (:mod:`textwm.diffusion.wedlm`);
* the *leading filled run* (filled slots at ``P, P+1, ...`` before the first mask) is committed:
  it was fed first, in order, right after the prefix, so its K/V equal a left-to-right pass and
  stay in the cache;
* each mask's prediction is the token at its own position (no shift). A mask is filled when
  ``entropy + position_penalty * (position - first mask position) < entropy_threshold``; at least
  one (the lowest score) is filled per step. The mask token is never produced;
* the window is refilled with masks up to ``window_size`` slots, never past ``prompt + gen_length``;
* a row ends when a committed token is a stop id (output: the tokens before it) or when
  ``gen_length`` tokens are committed.

Batching: every row has its own committed length; the cache writes each row's window right after
its own prefix and the attention mask hides other rows' offsets, so a row's tokens do not depend on
its batch. Finished rows leave the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from textwm.generation.base import MaskDecoder, grow_kv_buffers
from textwm.generation.sampling import entropy, sample
from textwm.generation.sdar import Generation
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec


class RaggedKVCache:
    """K/V buffers ``[R, H_kv, T, D]`` per layer; row ``r`` holds ``lengths[r]`` committed tokens.

    A forward's K/V are written at each row's own offset (``lengths[r] + slot``); only
    :meth:`commit` keeps them, so uncommitted K/V are overwritten by the next forward.
    """

    def __init__(self, capacity: int, lengths: torch.Tensor):
        self.capacity = capacity
        self.lengths = lengths.clone()
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        grow_kv_buffers(self.keys, self.values, key_states, value_states, layer_idx, self.capacity)
        width = key_states.shape[-2]
        end = int(self.lengths.max()) + width
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: {end} > capacity {self.capacity}")
        slots = self.lengths[:, None] + torch.arange(width, device=self.lengths.device)[None, :]   # [R, W]
        index = slots[:, None, :, None].expand(-1, key_states.shape[1], -1, key_states.shape[-1])
        self.keys[layer_idx].scatter_(2, index, key_states)
        self.values[layer_idx].scatter_(2, index.expand(-1, -1, -1, value_states.shape[-1]), value_states)
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.lengths.max())

    def commit(self, num_tokens: torch.Tensor) -> None:
        """Keep, per row, the first ``num_tokens[r]`` K/V written by the last forward."""
        self.lengths += num_tokens

    def select_rows(self, rows: torch.Tensor) -> None:
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.lengths = self.lengths.index_select(0, rows)


def step_mask(pad: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """Attention of a ``width``-slot window over ``[cache, window]``: ``[R, 1, width, K]`` bool.

    Row ``r`` sees its committed keys ``pad[r] <= j < lengths[r]`` and, causally by physical
    order, its own window slots, which start at ``lengths[r]``.
    """
    keys = int(lengths.max()) + width
    j = torch.arange(keys, device=lengths.device)[None, :]
    rel = j - lengths[:, None]                                                   # [R, K]
    committed = (j >= pad[:, None]) & (rel < 0)
    slot = torch.arange(width, device=lengths.device)[None, :, None]
    window = (rel[:, None, :] >= 0) & (rel[:, None, :] <= slot)                  # [R, W, K]
    return (committed[:, None, :] | window)[:, None]


class WeDLMDecoder(MaskDecoder):
    """Streaming parallel decoder over a loaded WeDLM model (any transformers causal LM class)."""

    family = "wedlm"

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.stop_ids = set(spec.stop_ids or ())

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: RaggedKVCache):
        return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                          use_cache=True).logits

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        """Decode one continuation per prompt (token ids, chat template already applied)."""
        if not prompts:
            return []
        if gen_lengths is not None and (len(gen_lengths) != len(prompts) or min(gen_lengths) < 1):
            raise ValueError("gen_lengths must give a positive length for every prompt")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: WeDLM decoding needs at least one prompt token")
        dev, width = self.device, settings.window_size
        gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
        n = len(prompts)
        budgets = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * n
        start = max(len(p) for p in prompts)
        pad = torch.tensor([start - len(p) for p in prompts], device=dev)
        cache = RaggedKVCache(start + max(budgets) + width, torch.zeros(n, dtype=torch.long, device=dev))

        # Prefill: left-padded prompts, causal, padding keys hidden (padding queries see themselves).
        ids = torch.full((n, start), self.pad_id, dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, start - len(p):] = torch.tensor(p, device=dev)
        col = torch.arange(start, device=dev)
        key_ok = col[None, :] >= pad[:, None]
        mask = key_ok[:, None, :] & (col[None, :, None] >= col[None, None, :])
        mask |= torch.eye(start, dtype=torch.bool, device=dev)[None] & ~key_ok[:, :, None]
        self._forward(ids, (col[None, :] - pad[:, None]).clamp(min=0), mask[:, None], cache)
        cache.commit(torch.full((n,), start, device=dev))

        results = [Generation(token_ids=[], finish_reason="length", num_forwards=1) for _ in range(n)]
        windows: list[list[int | None]] = [[None] * min(width, b) for b in budgets]   # None = mask
        rows = list(range(n))                                                      # original index per active row
        while rows:
            # Feed filled slots first, then masks, each with its logical position.
            orders = [[i for i, t in enumerate(w) if t is not None] + [i for i, t in enumerate(w) if t is None]
                      for w in (windows[r] for r in rows)]
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long, device=dev)
            positions = torch.zeros((len(rows), width), dtype=torch.long, device=dev)
            for k, (r, order) in enumerate(zip(rows, orders)):
                base = len(prompts[r]) + len(results[r].token_ids)
                ids[k, :len(order)] = torch.tensor([self.mask_id if windows[r][i] is None else windows[r][i]
                                                    for i in order], device=dev)
                positions[k, :len(order)] = base + torch.tensor(order, device=dev)
            logits = self._forward(ids, positions, step_mask(pad, cache.lengths, width), cache)
            logits[..., self.mask_id] = float("-inf")                  # the mask token is never produced

            # Predictions at every mask slot of every row, in one sampling call.
            mask_slots = [(k, slot) for k, (r, order) in enumerate(zip(rows, orders))
                          for slot, i in enumerate(order) if windows[r][i] is None]
            tokens: list[int] = []
            ent: list[float] = []
            if mask_slots:
                ks, slots = (torch.tensor(x, device=dev) for x in zip(*mask_slots))
                drawn = sample(logits[ks, slots], temperature=settings.temperature, top_k=settings.top_k,
                               top_p=settings.top_p, generator=gen)
                tokens, ent = drawn.tokens.tolist(), entropy(drawn.probs).tolist()
            committed = torch.zeros(len(rows), dtype=torch.long, device=dev)
            finished, cursor = [], 0
            for k, (r, order) in enumerate(zip(rows, orders)):
                res, window = results[r], windows[r]
                res.num_forwards += 1
                # Fill this row's masks by score (predictions come from the forward above).
                masks = [i for i in order if window[i] is None]
                row_tokens, row_ent = tokens[cursor:cursor + len(masks)], ent[cursor:cursor + len(masks)]
                cursor += len(masks)
                # Commit the leading filled run (fed first, in order: its K/V are a causal pass).
                lead = 0
                while lead < len(window) and window[lead] is not None:
                    lead += 1
                committed[k] = lead
                for tok in window[:lead]:
                    if tok in self.stop_ids:
                        res.finish_reason = "stop"
                        break
                    res.token_ids.append(tok)
                if res.finish_reason == "stop" or len(res.token_ids) >= budgets[r]:
                    finished.append(k)
                    continue
                if masks:
                    first = masks[0]
                    scores = [e + settings.position_penalty * (i - first) for i, e in zip(masks, row_ent)]
                    chosen = [j for j, s in enumerate(scores) if s < settings.entropy_threshold]
                    for j in chosen or [min(range(len(scores)), key=scores.__getitem__)]:
                        window[masks[j]] = row_tokens[j]
                # Slide: committed slots leave, masks join up to the window size and the budget.
                room = budgets[r] - len(res.token_ids)
                windows[r] = window[lead:] + [None] * (min(width, room) - (len(window) - lead))
            cache.commit(committed)
            if finished:
                keep = [k for k in range(len(rows)) if k not in set(finished)]
                if keep:
                    idx = torch.tensor(keep, device=dev)
                    cache.select_rows(idx)
                    pad = pad.index_select(0, idx)
                rows = [rows[k] for k in keep]
        return results
