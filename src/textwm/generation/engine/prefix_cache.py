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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: Tokens a block holds: a multiple of every SDAR block length the engine decodes (at most 64), so that a
#: block-causal prefix ends on an SDAR block's boundary.
BLOCK_TOKENS = 64


@dataclass
class PrefixStats:
    """Prompt tokens the prefills were given, those found in the prefix cache, and those computed."""

    prompt_tokens: int = 0
    hit_tokens: int = 0
    computed_tokens: int = 0


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
        shape = (max_blocks, n_kv, block_tokens, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
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
            digest.update(torch.tensor(prompt[start:start + bt], dtype=torch.int64).numpy().tobytes())
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

    def load(self, layer: int, row_keys: torch.Tensor, row_values: torch.Tensor, blocks: Sequence[int]) -> None:
        """Copy ``blocks`` into one row's K/V ``[H_kv, T, D]`` of ``layer``, from column 0 (one copy each)."""
        if not blocks:
            return
        width = len(blocks) * self.block_tokens
        index = torch.tensor(blocks, device=row_keys.device)
        for pool, row in ((self.keys[layer], row_keys), (self.values[layer], row_values)):
            row[:, :width] = pool[index].transpose(0, 1).reshape(row.shape[0], width, row.shape[2])

    def store(self, keys: Sequence[bytes], first: int, row_keys: list[torch.Tensor],
              row_values: list[torch.Tensor]) -> None:
        """Keep blocks ``first..`` of ``keys`` from one row's K/V (``[H_kv, T, D]`` per layer), evicting the least
        recently used blocks for them."""
        bt = self.block_tokens
        writes: dict[int, int] = {}      # pool index -> block of the prompt (a budget smaller than the prompt
        for j in range(first, len(keys)):  # reuses a pool block: its last writer is the one the index names)
            if keys[j] in self.index:
                self.index.move_to_end(keys[j])
                continue
            if self.free:
                block = self.free.pop()
            else:
                _, block = self.index.popitem(last=False)
            self.index[keys[j]] = block
            writes[block] = j
        new = [(j, block) for block, j in writes.items()]
        if not new:
            return
        device = row_keys[0].device
        pool_index = torch.tensor([b for _, b in new], device=device)
        columns = torch.cat([torch.arange(j * bt, (j + 1) * bt) for j, _ in new]).to(device)
        for layer, (k, v) in enumerate(zip(row_keys, row_values)):
            for pool, row in ((self.keys[layer], k), (self.values[layer], v)):
                pool[pool_index] = row[:, columns].reshape(row.shape[0], len(new), bt, row.shape[2]).transpose(0, 1)
