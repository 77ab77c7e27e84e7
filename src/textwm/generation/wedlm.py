"""Batched WeDLM streaming parallel decoding under causal attention, with a KV cache.

The rules are Tencent/WeDLM's engine (``wedlm/engine/wedlm_decoder.py`` ``WeDLMDecoder``,
``sampler.py`` ``Sampler``, ``scheduler.py`` ``Scheduler.postprocess``), per
prompt:

* the prompt is prefilled with ordinary causal attention (positions from 0);
* a window of ``window_size`` (W) slots follows the committed prefix, at logical positions ``P,
  P+1, ...`` (``P`` = prompt + committed tokens); it starts as W masks (``init_wedlm_state``);
* *refill before the forward* (``_refill_window_masks``, called by ``prepare_decode_inputs``): as
  many masks as the window's leading run of filled slots are appended, so a forward carries that
  run plus W further slots (W + run <= 2W in all). The window is never shrunk to the remaining
  budget: slots past ``gen_length`` are decoded too and cut at commit;
* each forward feeds the window's filled slots first, then its masks, each in logical order and
  with its true position id, under causal attention by physical order (``_prepare_window_inputs``)
  — the layout the model was trained on (:mod:`textwm.diffusion.wedlm`);
* the *leading filled run* is committed (``_process_pruned_tokens``): it was fed first, in order,
  right after the prefix, so its K/V equal a left-to-right pass and stay in the cache. The output
  ends at the first committed stop id or at ``gen_length`` tokens (the rest of the run is cut;
  ``Scheduler.postprocess``);
* the masks of the forward are then scored on the *raw* logits (``Sampler.process_mask_positions``):
  no token is banned (the mask token included: upstream does not suppress it), the entropy is that
  of ``softmax(logits)`` (``compute_entropy``), before temperature and filters; a mask is filled
  when ``entropy + position_penalty * (index - first mask index) < entropy_threshold``, else the
  single lowest score is (``select_positions_to_fill``); its token is drawn by
  :func:`~textwm.generation.sampling.sample_filter_first` (greedy at temperature 0; else top-k,
  top-p on the unscaled logits, then the temperature; ``sample_tokens``).

One convention of ours: a stop id ends the row with ``finish_reason == "stop"`` and is *not* in
``token_ids`` (upstream keeps it as the last completion id). ``repetition_penalty`` is not applied
(upstream has none).

Batching: every row has its own committed length; the cache writes each row's window right after
its own prefix and the attention mask hides other rows' offsets, so a row's tokens do not depend on
its batch (greedy; a seeded draw shares one generator across the batch). Rows' windows may differ
in length (W + run): shorter ones are padded at the end, where no real slot sees them. Finished rows
leave the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from textwm.generation.anchors import AnchoredAnswer, Layout, answer, slots_of
from textwm.generation.base import Generation, MaskDecoder, grow_kv_buffers
from textwm.generation.sampling import logits_entropy, sample_filter_first
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

#: A window slot: a token id, or None for a mask.
Window = list[int | None]


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


def leading_run(window: Window) -> int:
    """Length of the window's leading run of filled slots (the tokens the next forward commits)."""
    run = 0
    while run < len(window) and window[run] is not None:
        run += 1
    return run


def feed_order(window: Window) -> list[int]:
    """Window indices in feeding order: filled slots first, then masks, each ascending (``_prepare_window_inputs``)."""
    return [i for i, t in enumerate(window) if t is not None] + [i for i, t in enumerate(window) if t is None]


def positions_to_fill(entropies: Sequence[float], masks: Sequence[int], threshold: float,
                      penalty: float) -> list[int]:
    """Which masks a step fills (indices into ``masks``, the masks' window indices in order).

    ``Sampler.select_positions_to_fill``: every mask whose ``entropy + penalty * (index - masks[0])``
    is below ``threshold``; if none, the single lowest (the first on a tie).
    """
    scores = [e + penalty * (i - masks[0]) for i, e in zip(masks, entropies)]
    chosen = [j for j, s in enumerate(scores) if s < threshold]
    return chosen or [min(range(len(scores)), key=scores.__getitem__)]


def commit_run(result: Generation, run: Sequence[int], budget: int, stop_ids: set[int]) -> bool:
    """Append a committed run to ``result``; True when the row is finished.

    ``_process_pruned_tokens`` and ``Scheduler.postprocess``: tokens are taken in order until a stop
    id (finish "stop"; the stop id itself is left out, our convention) or until ``budget`` tokens
    (finish "length"; the rest of the run is cut).
    """
    for tok in run:
        if tok in stop_ids:
            result.finish_reason = "stop"
            return True
        result.token_ids.append(tok)
        if len(result.token_ids) >= budget:
            return True
    return False


def commit_anchored(result: Generation, run: Sequence[int], layout: Layout, stop_ids: set[int]) -> bool:
    """Anchored decoding's :func:`commit_run`: the run is appended up to the layout's end, stop ids included
    (they end a closed slot's content, :func:`~textwm.generation.anchors.slots_of`); a stop id in the open
    last slot ends the row. True when the row is finished."""
    for tok in run:
        offset = len(result.token_ids)
        if offset >= len(layout):
            return True
        result.token_ids.append(tok)
        if offset >= layout.open_from and tok in stop_ids:
            result.finish_reason = "stop"
            return True
    return len(result.token_ids) >= len(layout)


def anchored_slots(layout: Layout | None, first: int, count: int) -> Window:
    """``count`` new window slots from answer position ``first``: a layout's anchor token where it has one,
    else a mask."""
    if layout is None:
        return [None] * count
    return [layout.fixed[i] if i < len(layout) else None for i in range(first, first + count)]


class WeDLMDecoder(MaskDecoder):
    """Streaming parallel decoder over a loaded WeDLM model (any transformers causal LM class)."""

    family = "wedlm"

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.stop_ids = set(spec.stop_ids or ())

    def _prefill(self, prompts: Sequence[Sequence[int]], capacity_after: int) -> tuple[RaggedKVCache, torch.Tensor]:
        """Left-padded prompts, causal, padding keys hidden (padding queries see themselves).

        Returns the cache (every row's length = the longest prompt) and ``pad [R]``, each row's padding.
        """
        dev, n = self.device, len(prompts)
        start = max(len(p) for p in prompts)
        pad = torch.tensor([start - len(p) for p in prompts], device=dev)
        cache = RaggedKVCache(start + capacity_after, torch.zeros(n, dtype=torch.long, device=dev))
        ids = torch.full((n, start), self.pad_id, dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, start - len(p):] = torch.tensor(p, device=dev)
        col = torch.arange(start, device=dev)
        key_ok = col[None, :] >= pad[:, None]
        mask = key_ok[:, None, :] & (col[None, :, None] >= col[None, None, :])
        mask |= torch.eye(start, dtype=torch.bool, device=dev)[None] & ~key_ok[:, :, None]
        self._forward(ids, (col[None, :] - pad[:, None]).clamp(min=0), mask[:, None], cache)
        cache.commit(torch.full((n,), start, device=dev))
        return cache, pad

    def _window_inputs(self, windows: Sequence[Window], bases: Sequence[int],
                       orders: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``ids, positions [R, width]``: each window in feeding order at ``base + index``, padded at the end."""
        width = max(len(o) for o in orders)
        ids = torch.full((len(windows), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(windows), width), dtype=torch.long)
        for k, (window, base, order) in enumerate(zip(windows, bases, orders)):
            ids[k, :len(order)] = torch.tensor([self.mask_id if window[i] is None else window[i] for i in order])
            positions[k, :len(order)] = base + torch.tensor(order)
        return ids.to(self.device), positions.to(self.device)

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
        return self._decode(prompts, settings, list(gen_lengths) if gen_lengths is not None
                            else [settings.gen_length] * len(prompts))

    @torch.no_grad()
    def generate_anchored(self, prompts: Sequence[Sequence[int]], layouts: Sequence[Layout],
                          settings: DecodeSettings, decode: Any) -> list[AnchoredAnswer]:
        """Fill each row's template (:mod:`textwm.generation.anchors`): every slot that enters the window at an
        anchor's position holds the anchor token from the start (a filled slot, fed before the masks and never
        redrawn), so the masks around it are predicted with it in view; the rest as :meth:`generate`."""
        if len(layouts) != len(prompts) or any(len(layout) == 0 for layout in layouts):
            raise ValueError("every prompt needs a non-empty layout")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: WeDLM decoding needs at least one prompt token")
        rows = self._decode(prompts, settings, [len(layout) for layout in layouts], layouts)
        out = []
        for layout, row in zip(layouts, rows):
            slots, finish = slots_of(layout, row.token_ids, self.stop_ids)
            out.append(answer(layout, slots, decode, finish, row.num_forwards))
        return out

    def _decode(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings, budgets: list[int],
                layouts: Sequence[Layout] | None = None) -> list[Generation]:
        dev, width = self.device, settings.window_size
        gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
        n = len(prompts)
        layout_of = list(layouts) if layouts is not None else [None] * n
        # A row's forward writes at most 2W slots past its committed prefix (< prompt + budget).
        cache, pad = self._prefill(prompts, max(budgets) + 2 * width)

        results = [Generation(token_ids=[], finish_reason="length", num_forwards=1) for _ in range(n)]
        windows: list[Window] = [anchored_slots(layout_of[r], 0, width) for r in range(n)]
        rows = list(range(n))                                                      # original index per active row
        while rows:
            runs = [leading_run(windows[r]) for r in rows]
            for r, run in zip(rows, runs):                                         # refill before the forward
                windows[r] = windows[r] + anchored_slots(layout_of[r], len(results[r].token_ids) + len(windows[r]), run)
            orders = [feed_order(windows[r]) for r in rows]
            ids, positions = self._window_inputs([windows[r] for r in rows],
                                                 [len(prompts[r]) + len(results[r].token_ids) for r in rows], orders)
            logits = self._forward(ids, positions, step_mask(pad, cache.lengths, ids.shape[1]), cache)

            # Every mask slot of every row (each window has one: the refill or its first slot), scored
            # and drawn in one call on the raw logits.
            # (With anchors a window can hold no mask: then it only commits.)
            mask_slots = [(k, slot) for k, (r, order) in enumerate(zip(rows, orders))
                          for slot, i in enumerate(order) if windows[r][i] is None]
            tokens, ent = [], []
            if mask_slots:
                ks, slots = (torch.tensor(x, device=dev) for x in zip(*mask_slots))
                raw = logits[ks, slots]
                tokens = sample_filter_first(raw, temperature=settings.temperature, top_k=settings.top_k,
                                             top_p=settings.top_p, generator=gen).tokens.tolist()
                ent = logits_entropy(raw).tolist()

            finished, cursor = [], 0
            for k, (r, run) in enumerate(zip(rows, runs)):
                window = windows[r]
                results[r].num_forwards += 1
                masks = [i for i, t in enumerate(window) if t is None]
                row_tokens, row_ent = tokens[cursor:cursor + len(masks)], ent[cursor:cursor + len(masks)]
                cursor += len(masks)
                done = (commit_run(results[r], window[:run], budgets[r], self.stop_ids) if layout_of[r] is None
                        else commit_anchored(results[r], window[:run], layout_of[r], self.stop_ids))
                if done:
                    finished.append(k)
                    continue
                if masks:
                    for j in positions_to_fill(row_ent, masks, settings.entropy_threshold,
                                               settings.position_penalty):
                        window[masks[j]] = row_tokens[j]
                windows[r] = window[run:]                                          # W slots again
            cache.commit(torch.tensor(runs, device=dev))
            if finished:
                keep = [k for k in range(len(rows)) if k not in set(finished)]
                if keep:
                    idx = torch.tensor(keep, device=dev)
                    cache.select_rows(idx)
                    pad = pad.index_select(0, idx)
                rows = [rows[k] for k in keep]
        return results
