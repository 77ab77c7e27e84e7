"""Prefix caching for the engine: the K/V of prompt prefixes kept in fixed-size blocks, keyed by their tokens.

GRPO traffic repeats prefixes: the G rollouts of a task share their first prompt, every world-model query repeats
the system prompt and the scene, and a multi-turn episode's prompt extends its previous one. The engine's cache
is static (row ``r`` owns columns ``0..capacity-1`` of its rows in every layer), so a cached prefix is *copied*
into a joining row's columns, and only the rest of its prompt is prefilled (attending to the copied columns).

* **Blocks.** A block holds the K/V of ``block_tokens`` consecutive prompt tokens at one position, in a pool of
  ``[blocks, H_kv, block_tokens, D]`` per layer. Only whole blocks from a prompt's start are cached.
* **Keys.** A block's key is a digest of its parent's key, its tokens and the *attention rule* of the prefill
  that made it (causal, or block-causal with SDAR's block length: a column's K/V past the first layer depend on
  what it saw), so equal keys mean equal K/V, up to the float rounding of another batch.
* **Budget and eviction.** At most ``max_blocks`` blocks; a new block takes the least recently used one's place.
  A block is only read while a prefill copies it, on the worker's thread, so nothing running holds one: no
  reference counts are needed (a block's children left behind by an eviction are unreachable, and age out).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: Tokens a block holds: a multiple of every SDAR block length the engine decodes (at most 64), so that a
#: block-causal prefix ends on an SDAR block's boundary.
BLOCK_TOKENS = 64


@dataclass
class PrefixStats:
    """Prompt tokens the prefills were given, those found in the prefix cache, and those computed; the prefill
    forwards that computed them."""

    prompt_tokens: int = 0
    hit_tokens: int = 0
    computed_tokens: int = 0
    #: Prefill forwards run, and those of them at the prompts' own shape, eagerly (wider than a bucketed forward
    #: may be; an eager prefill counts once however many chunks of rows it takes).
    forwards: int = 0
    unbucketed_forwards: int = 0


class PrefixCache:
    """A pool of cached prefix blocks for one :class:`~textwm.generation.engine.static_model.StaticModel`.

    Args:
        layers, n_kv, head_dim, dtype, device: the model's cache shape.
        max_blocks: blocks kept at most (``max_blocks * block_tokens`` tokens of every layer's K and V).
        block_tokens: tokens a block holds.
    """

    def __init__(self, *, layers: int, n_kv: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 max_blocks: int, block_tokens: int = BLOCK_TOKENS):
        if max_blocks < 1 or block_tokens < 1:
            raise ValueError(f"max_blocks and block_tokens must be >= 1, got {max_blocks} and {block_tokens}")
        self.block_tokens, self.max_blocks = block_tokens, max_blocks
        shape = (layers, max_blocks, n_kv, block_tokens, head_dim)
        #: Every layer's pool blocks ``[L, max_blocks, H_kv, block_tokens, D]``.
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        #: Block key -> pool index, least recently used first.
        self.index: OrderedDict[bytes, int] = OrderedDict()
        self.free = list(range(max_blocks - 1, -1, -1))

    @classmethod
    def bytes_per_block(cls, *, layers: int, n_kv: int, head_dim: int, dtype: torch.dtype,
                        block_tokens: int = BLOCK_TOKENS) -> int:
        return 2 * layers * n_kv * block_tokens * head_dim * torch.empty(0, dtype=dtype).element_size()

    def chain(self, prompt: Sequence[int], usable: int, rule: int | None) -> list[bytes]:
        """The keys of the whole blocks in ``prompt[:usable]`` under attention ``rule`` (None: causal; else the
        block-causal block length)."""
        keys, parent, bt = [], f"rule={rule}".encode(), self.block_tokens
        for start in range(0, usable - bt + 1, bt):
            digest = hashlib.blake2b(parent, digest_size=16)
            digest.update(array("q", prompt[start:start + bt]).tobytes())
            parent = digest.digest()
            keys.append(parent)
        return keys

    def lookup(self, keys: Sequence[bytes]) -> list[int]:
        """Pool indices of the longest cached run of ``keys`` from the first (each marked recently used)."""
        found = []
        for key in keys:
            block = self.index.get(key)
            if block is None:
                break
            self.index.move_to_end(key)
            found.append(block)
        return found

    def load(self, keys: torch.Tensor, values: torch.Tensor, slots: Sequence[int],
             found: Sequence[Sequence[int]]) -> None:
        """Copy each row's ``found`` blocks into its K/V from column 0: ``keys`` / ``values`` are the engine's cache
        of every layer ``[L, rows, H_kv, T, D]``, ``slots[i]`` the row of ``found[i]``. One gather and one write per
        tensor for all the rows and layers (a copy per row or layer costs launches that a small model's prefill
        does not)."""
        pairs = [(slot, j, block) for slot, blocks in zip(slots, found) for j, block in enumerate(blocks)]
        if not pairs:
            return
        rows, columns, pool_index = self._places(pairs, keys.device)
        for pool, cache in ((self.keys, keys), (self.values, values)):
            # [L, m, H_kv, bt, D] -> [m * bt, L, H_kv, D], the layout of cache[:, rows, :, columns]
            cache[:, rows, :, columns] = pool[:, pool_index].permute(1, 3, 0, 2, 4).flatten(0, 1)

    def store(self, chains: Sequence[Sequence[bytes]], firsts: Sequence[int], cache_keys: torch.Tensor,
              cache_values: torch.Tensor, slots: Sequence[int]) -> None:
        """Keep blocks ``firsts[i]..`` of ``chains[i]`` from engine row ``slots[i]`` (``cache_keys`` / ``cache_values``: the
        engine's cache of every layer ``[L, rows, H_kv, T, D]``), evicting the least recently used blocks for them;
        a block already kept (by an earlier row too) is only marked used."""
        writes: dict[int, tuple[int, int]] = {}   # pool index -> (row, block of its prompt): a budget smaller
        for slot, keys, first in zip(slots, chains, firsts):  # than the prefill's blocks reuses a pool block,
            for j in range(first, len(keys)):                 # and its last writer is the one the index names
                if keys[j] in self.index:
                    self.index.move_to_end(keys[j])
                    continue
                if self.free:
                    block = self.free.pop()
                else:
                    _, block = self.index.popitem(last=False)
                self.index[keys[j]] = block
                writes[block] = (slot, j)
        if not writes:
            return
        rows, columns, pool_index = self._places([(slot, j, block) for block, (slot, j) in writes.items()],
                                                 cache_keys.device)
        m, bt = len(writes), self.block_tokens
        for pool, cache in ((self.keys, cache_keys), (self.values, cache_values)):
            # [m * bt, L, H_kv, D] -> [L, m, H_kv, bt, D]
            pool[:, pool_index] = cache[:, rows, :, columns].unflatten(0, (m, bt)).permute(2, 0, 3, 1, 4)

    def _places(self, pairs: Sequence[tuple[int, int, int]], device: torch.device):
        """For ``(row, block of its prompt, pool block)`` triples: each token's row and column ``[m * bt]`` and
        the pool blocks ``[m]``."""
        bt = self.block_tokens
        rows = torch.tensor([r for r, _, _ in pairs], device=device).repeat_interleave(bt)
        columns = (torch.tensor([j for _, j, _ in pairs], device=device)[:, None] * bt
                   + torch.arange(bt, device=device)[None, :]).flatten()
        return rows, columns, torch.tensor([b for _, _, b in pairs], device=device)
