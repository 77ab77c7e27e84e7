"""The AR + diffusion hybrid in the engine: greedy speculative decoding on static caches and CUDA graphs, one row at
a time (batch 1, where an AR forward is all weight reads and reading a draft costs it little more than one token).

The rounds are :class:`~textwm.generation.speculative_rounds.SpeculativeRounds`' (the answers are the AR verifier's greedy
ones whatever the drafter writes); what this class changes is what each round costs:

* **the verifier** is a :class:`~textwm.generation.engine.static_model.StaticModel` of one row. A round feeds the
  context's last token and the draft at their columns (positions = columns, causal limits) through
  :class:`~textwm.generation.engine.graphs.GraphedForward`: one graph per (draft length + 1, kv bucket). Its cache
  is never cut back: a rejected draft's K/V stay in columns past the kept tokens, and every query's limit is its
  own column + 1, so none is read before the next round overwrites it;
* **the drafter** is a :class:`~textwm.generation.engine.core.DecodeEngine` of one row (SDAR or WeDLM, the engine's
  rules) whose prefix cache keeps the context's whole blocks from one round to the next: a draft prefills only
  the context's tail past its last cached block, then decodes its one or two blocks (SDAR) or window steps (WeDLM).

    decoder = EngineSpeculativeDecoder(load_model("runs/ar/final"), load_model("runs/sdar/final"), draft_length=4)
    (answer,) = decoder.generate([prompt_ids], DecodeSettings(temperature=0, gen_length=256, block_length=4))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from textwm.generation.base import Generation
from textwm.generation.engine.core import DecodeEngine, has_experts
from textwm.generation.engine.graphs import GraphedForward, kv_buckets
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.settings import DecodeSettings
from textwm.generation.speculative_rounds import SpeculativeRounds
from textwm.models.families import get_family

#: The drafter's prefix-cache block at least (tokens): the most of its context a round prefills again.
DRAFT_CACHE_BLOCK = 16


class EngineSpeculativeDecoder(SpeculativeRounds):
    """The AR ``verifier``'s greedy answers, drafted by ``drafter`` in the engine (checks and arguments as
    :class:`~textwm.generation.speculative.SpeculativeDecoder`'s).

    Args:
        max_len: prompt + answer of any row, in tokens (both caches are allocated for it).
        block_length: the SDAR drafter's block length (its prefix-cache block is a multiple of it).
        cuda_graphs: replay both models' forwards as CUDA graphs (default: on CUDA, without mixture-of-experts).
    """

    def __init__(self, verifier: Any, drafter: Any, *, draft_length: int = 4, max_len: int = 4096,
                 block_length: int = 4, cuda_graphs: bool | None = None, pad_token_id: int | None = None):
        super().__init__(verifier, drafter, draft_length=draft_length, pad_token_id=pad_token_id)
        self.max_len = max_len
        # A draft's round may write up to draft_length columns past the answer's last.
        self.net = StaticModel(verifier.model, rows=1, capacity=max_len + draft_length + 1)
        if cuda_graphs is None:
            cuda_graphs = self.net.device.type == "cuda" and not has_experts(verifier.model)
        self.forward = GraphedForward(self.net, enabled=cuda_graphs)
        cache_block = -(-DRAFT_CACHE_BLOCK // block_length) * block_length   # SDAR caches whole blocks only
        self.drafter = DecodeEngine(drafter.model, drafter.spec, pad_token_id=pad_token_id, max_rows=1,
                                    max_len=max_len, cuda_graphs=cuda_graphs, prefix_cache_tokens=max_len,
                                    prefix_block_tokens=cache_block)
        self.cache_block = cache_block

    def warm_up(self, settings: DecodeSettings) -> None:
        """Capture the verifier's round of every draft length and kv bucket, and the drafter's shapes, before the
        first prompt (CUDA; the row must be idle)."""
        draft_settings = dataclasses.replace(settings, temperature=0.0, seed=None)
        self.drafter.warm_up(draft_settings)
        for kv_len in kv_buckets(self.net.capacity):
            for q in range(1, self.draft_length + 2):
                self.forward.warm(1, q, kv_len)

    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        limits = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * len(prompts)
        too_long = [i for i, (p, limit) in enumerate(zip(prompts, limits)) if len(p) + limit > self.max_len]
        if too_long:
            raise ValueError(f"prompt {too_long[0]} ({len(prompts[too_long[0]])} tokens) + its answer "
                             f"({limits[too_long[0]]}) exceeds max_len {self.max_len}")
        if get_family(self.drafter.spec.family).block_causal and self.cache_block % settings.block_length:
            raise ValueError(f"block_length {settings.block_length} does not divide the drafter's prefix-cache block "
                             f"{self.cache_block}, which would then keep nothing: build the decoder with "
                             f"block_length={settings.block_length}")
        return super().generate(prompts, settings, gen_lengths)

    def _start(self, prompt: list[int]) -> torch.Tensor:
        return self.net.prefill(torch.zeros(1, dtype=torch.long, device=self.net.device), [prompt])[0]   # [V]

    def _verify(self, context: list[int], draft: list[int]) -> torch.Tensor:
        # The cache holds context[:-1] at columns 0..len-2: feed the last token and the draft from column len-1.
        start, q = len(context) - 1, 1 + len(draft)
        dev = self.net.device
        ids = torch.tensor([context[-1:] + draft], device=dev)
        cols = torch.arange(start, start + q, device=dev)[None, :]
        return self.forward(ids, cols, cols, cols + 1, kv_len=start + q)[0]

    def _keep(self, kept: int, drafted: int) -> None:
        pass   # the columns past the kept tokens are overwritten before any query reads them (module docstring)

    def _propose(self, context: list[int], settings: DecodeSettings) -> Generation:
        (out,) = self.drafter.generate([context], settings)
        return out
