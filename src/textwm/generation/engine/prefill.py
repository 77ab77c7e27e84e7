"""The engine's prefills: joining rows' prompts written into their cache rows, sharing what can be shared.

A prefill of ``n`` joining rows (:meth:`Prefiller.__call__`) goes through these steps:

* **Identical prompts** (a GRPO group's first turn sends its task's prompt G times) are computed once; the
  others' rows get a copy of that row's K/V and its logits. Only with a prefix cache: without one, every prompt
  is computed whole, which is what ``--no-prefix-cache`` is there to compare against.
* **The prefix cache** (:mod:`textwm.generation.engine.prefix_cache`): each prompt's longest cached prefix is
  copied into its row and only the rest is computed, attending to it; the new whole blocks are kept after.
  Prompts of one prefill that share blocks the cache lacks take two passes: the first of them computes the
  blocks, the others find them.
* **Bucketed forwards.** What is left to compute, ``[n, width]`` tokens after each row's cached prefix, runs in
  forwards of bucketed shapes when its width bucket (the next of :data:`WIDTH_BUCKETS`) is within
  ``graph_tokens``: as many rows a forward as fit ``graph_tokens`` at that width, padded to a power of two.
  Where the engine has CUDA graphs those forwards are replayed (:meth:`GraphedForward.prefill <textwm.generation.engine.graphs.GraphedForward.prefill>`),
  so a join costs a replay or a few instead of a launch per operation of every layer, which is what bounds the
  prefills of a small model (and of a large one after a cached prefix). Wider prefills run eagerly, the whole
  prompts through SDPA's flash kernel (:meth:`StaticModel.prefill`).

Padding is harmless by the cache's layout rule: a real row's padding queries write only its columns past its
prompt, which its decoding rewrites before reading; a padding row reads engine row ``slots[0]``'s column 0 and
writes that row's last column, which no prompt reaches.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from textwm.generation.engine.graphs import GraphedForward, row_bucket
from textwm.generation.engine.prefix_cache import PrefixCache, PrefixStats
from textwm.generation.engine.static_model import PREFILL_TOKENS, StaticModel

#: Widths a bucketed prefill is padded to (each about 1.5x the one before, so at most a third is padding).
WIDTH_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def width_bucket(width: int) -> int | None:
    """The smallest of :data:`WIDTH_BUCKETS` >= ``width``; None past the last."""
    return next((w for w in WIDTH_BUCKETS if w >= width), None)


def prefill_shapes(max_rows: int, graph_tokens: int) -> list[tuple[int, int]]:
    """Every ``(row bucket, width bucket)`` a bucketed prefill of at most ``max_rows`` rows can run."""
    buckets = sorted({row_bucket(n, max_rows) for n in range(1, max_rows + 1)})
    return [(b, w) for b in buckets for w in WIDTH_BUCKETS if b * w <= graph_tokens]


class Prefiller:
    """Prefills of joining rows into ``net``'s cache, through ``forward``'s graphs where they fit.

    Args:
        prefix_cache: the engine's cache of prompt-prefix K/V (None: every prompt is computed whole).
        graph_tokens: a prefill of at most this many padded tokens (row bucket x width bucket) runs as one
            bucketed forward; 0: always eagerly, unpadded.
    """

    def __init__(self, net: StaticModel, forward: GraphedForward, prefix_cache: PrefixCache | None, *,
                 graph_tokens: int):
        if graph_tokens < 0:
            raise ValueError(f"graph_tokens must be >= 0, got {graph_tokens}")
        self.net, self.forward, self.prefix_cache, self.graph_tokens = net, forward, prefix_cache, graph_tokens
        #: Prompt tokens prefilled, found (in the prefix cache or an identical prompt of the same prefill), and
        #: computed, since the engine was built.
        self.stats = PrefixStats()

    def shapes(self) -> list[tuple[int, int]]:
        """The bucketed shapes this prefiller can run (what a warm-up captures)."""
        return prefill_shapes(self.net.rows, self.graph_tokens)

    def __call__(self, slots: Sequence[int], prompts: list[list[int]], *, block: int | None = None,
                 pad_id: int = 0) -> torch.Tensor:
        """Write the K/V of ``prompts`` at columns ``0..len-1`` of engine rows ``slots``; the logits ``[n, V]``
        of each prompt's last token (the first token of an AR continuation).

        Causal attention, or block-causal (bidirectional inside blocks of ``block``: SDAR) when ``block`` is
        given. A cached prefix is whole blocks, and the last token of a prompt is always computed.
        """
        slots = list(slots)
        cache = self.prefix_cache
        if cache is not None and block is not None and cache.block_tokens % block:
            cache = None    # a cached block would end inside an SDAR block, whose K/V see past it
        if cache is None:
            return self._compute(slots, prompts, [0] * len(prompts), block, pad_id)
        first_of: dict[tuple[int, ...], int] = {}
        copies = [(i, first_of.setdefault(tuple(p), i)) for i, p in enumerate(prompts)]
        if any(i != lead for i, lead in copies):
            return self._once_each(slots, prompts, copies, block, pad_id)
        chains = [cache.chain(p, len(p) - 1, block) for p in prompts]
        found = [cache.lookup(keys) for keys in chains]
        followers = _followers(chains, found)
        if followers:
            # Prompts that share a block no cache holds yet (rollouts of one group whose new turns start alike):
            # the first of them computes it, the others find it, in a second prefill.
            lead = [i for i in range(len(prompts)) if i not in followers]
            order = lead + sorted(followers)
            out = torch.cat([self([slots[i] for i in part], [prompts[i] for i in part], block=block, pad_id=pad_id)
                             for part in (lead, sorted(followers))])
            return out[torch.tensor(order).argsort().to(out.device)]
        cache.load(self.net.all_keys, self.net.all_values, slots, found)
        starts = [len(blocks) * cache.block_tokens for blocks in found]
        self.stats.hit_tokens += sum(starts)
        logits = self._compute(slots, prompts, starts, block, pad_id)
        cache.store(chains, [s // cache.block_tokens for s in starts], self.net.all_keys, self.net.all_values, slots)
        return logits

    def _once_each(self, slots: list[int], prompts: list[list[int]], copies: list[tuple[int, int]],
                   block: int | None, pad_id: int) -> torch.Tensor:
        """Prefill each distinct prompt once (``copies[i]``: prompt ``i`` and the first prompt equal to it), then
        copy its K/V into the rows of its repeats, all layers at once: ``[n, V]``."""
        leads = sorted({lead for _, lead in copies})
        logits = self([slots[i] for i in leads], [prompts[i] for i in leads], block=block, pad_id=pad_id)
        repeats = [(i, lead) for i, lead in copies if i != lead]
        width = max(len(prompts[i]) for i, _ in repeats)
        dev = self.net.device
        to_rows = torch.tensor([slots[i] for i, _ in repeats], device=dev)
        from_rows = torch.tensor([slots[lead] for _, lead in repeats], device=dev)
        for cache in (self.net.all_keys, self.net.all_values):        # [L, rows, H_kv, T, D]
            cache[:, to_rows, :, :width] = cache[:, from_rows, :, :width]
        found = sum(len(prompts[i]) for i, _ in repeats)
        self.stats.prompt_tokens += found
        self.stats.hit_tokens += found
        return logits[torch.tensor([leads.index(lead) for _, lead in copies], device=logits.device)]

    def _compute(self, slots: list[int], prompts: list[list[int]], starts: list[int], block: int | None,
                 pad_id: int) -> torch.Tensor:
        """Compute ``prompts[i][starts[i]:]`` at its columns of row ``slots[i]``, attending to the columns before
        (which hold their K/V already): the logits ``[n, V]`` of the prompts' last tokens."""
        n = len(prompts)
        width = max(len(p) - s for p, s in zip(prompts, starts))
        self.stats.prompt_tokens += sum(map(len, prompts))
        self.stats.computed_tokens += sum(len(p) - s for p, s in zip(prompts, starts))
        width_b = width_bucket(width)
        if width_b is not None and width_b <= self.graph_tokens:
            # As many rows a forward as fit the budget at this width (a power of two): a join wider than one
            # graph takes a few replays rather than one eager forward.
            per_forward = min(row_bucket(n, self.net.rows), _power_of_two_at_most(self.graph_tokens // width_b))
            out = []
            for c in range(0, n, per_forward):
                part = slice(c, c + per_forward)
                inputs = self._inputs(slots[part], prompts[part], starts[part], block, pad_id,
                                      rows=row_bucket(len(prompts[part]), self.net.rows), width=width_b)
                # the graph's output is overwritten by the next replay: cloned
                out.append(self.forward.prefill(*inputs)[:len(prompts[part]), 0].clone())
                self.stats.forwards += 1
            return torch.cat(out)
        self.stats.unbucketed_forwards += 1
        self.stats.forwards += 1
        if not any(starts):
            return self.net.prefill(torch.tensor(slots, device=self.net.device), prompts, block=block, pad_id=pad_id)
        per_chunk = max(1, PREFILL_TOKENS // width)
        out = []
        for c in range(0, n, per_chunk):
            part = slice(c, c + per_chunk)
            kv_len = min(max(starts[part]) + width, self.net.capacity)
            inputs = self._inputs(slots[part], prompts[part], starts[part], block, pad_id,
                                  rows=len(prompts[part]), width=max(len(p) - s for p, s in
                                                                     zip(prompts[part], starts[part])))
            ids, positions, cols, limits, rows, last = inputs
            out.append(self.net.forward(ids, positions, cols, limits, kv_len=kv_len, rows=rows, last=last)[:, 0])
        return torch.cat(out)

    def _inputs(self, slots: list[int], prompts: list[list[int]], starts: list[int], block: int | None,
                pad_id: int, *, rows: int, width: int) -> tuple[torch.Tensor, ...]:
        """A prefill forward's inputs for ``rows`` rows of ``width`` queries (the prompts' padded to it), built on
        the host and moved in one copy: ids, positions, cols, limits ``[rows, width]``, rows and last ``[rows]``."""
        # Six planes, so that one host-to-device copy moves them all; the per-row rows and last ride in column 0.
        table = torch.zeros((6, rows, width), dtype=torch.long)
        ids, positions, cols, limits, engine_rows, last = table
        ids.fill_(pad_id)
        cap, arange = self.net.capacity, torch.arange(width)
        for i, (p, s) in enumerate(zip(prompts, starts)):
            ids[i, :len(p) - s] = torch.tensor(p[s:], dtype=torch.long)
            positions[i] = s + arange
            last[i, 0] = len(p) - s - 1
        n = len(prompts)
        cols[:n] = positions[:n].clamp(max=cap - 1)
        limits[:n] = positions[:n] + 1 if block is None else (positions[:n] // block + 1) * block
        engine_rows[:n, 0] = torch.tensor(slots)
        # Padding rows: they read the first real row's column 0 and write its last column (module docstring).
        engine_rows[n:, 0], cols[n:], limits[n:] = slots[0], cap - 1, 1
        table = table.to(self.net.device)
        return (*table[:4], table[4, :, 0], table[5, :, 0])


def _power_of_two_at_most(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _followers(chains: list[list[bytes]], found: list[list[int]]) -> set[int]:
    """Prompts whose first uncached block an earlier prompt of the same prefill computes too (``chains``: each
    prompt's block keys, ``found``: its cached leading blocks)."""
    computed: set[bytes] = set()
    followers = set()
    for i, (keys, hit) in enumerate(zip(chains, found)):
        if len(hit) == len(keys):
            continue
        if keys[len(hit)] in computed:
            followers.add(i)
        else:
            computed.update(keys[len(hit):])
    return followers
