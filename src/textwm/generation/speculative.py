"""Greedy speculative decoding with a masked-diffusion drafter and an AR verifier: the AR model's greedy answer,
in fewer AR forwards.

Each round, the drafter (SDAR or WeDLM, any :class:`~textwm.generation.base.Decoder` of the same tokenizer)
proposes the next ``draft_length`` tokens of the context, greedy; the verifier (an AR model) reads the context's
last token and the draft in one forward (its prefill of the prompt gives the first token, as an AR decoder's). The draft is kept up to its first token that differs from the
verifier's own greedy choice there, and the verifier's token at that place (or after the whole draft) is added.
Every kept token is one the verifier would have chosen itself, so the answer is the AR model's greedy answer
whatever the drafter writes: the drafter decides only how many tokens each verifier forward yields (between 1
and ``draft_length + 1``).

:class:`~textwm.generation.speculative_rounds.SpeculativeRounds` is the round loop, what any pairing shares; :class:`SpeculativeDecoder` runs it on the
reference decoders: the verifier keeps its K/V in a transformers cache that is cut back to the kept tokens after
each round, and the drafter decodes each draft from the whole context (the reference decoders keep no cache
across calls), so it measures what the pairing gives per verifier forward.
:class:`~textwm.generation.engine.speculative.EngineSpeculativeDecoder` runs it on the engine's static caches and
CUDA graphs, the drafter's context kept from round to round.

    decoder = SpeculativeDecoder(load_model("runs/ar/final"), load_model("runs/sdar/final"), draft_length=4)
    (answer,) = decoder.generate([prompt_ids], DecodeSettings(temperature=0, gen_length=256))
    decoder.stats.tokens_per_verifier_forward
"""

from __future__ import annotations

from typing import Any

import torch

from textwm.generation.base import Generation
from textwm.generation.decoders import reference_decoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.speculative_rounds import SpeculativeRounds, SpeculativeStats, check_pair

__all__ = ["SpeculativeDecoder", "SpeculativeRounds", "SpeculativeStats", "check_pair"]


class SpeculativeDecoder(SpeculativeRounds):
    """The AR ``verifier``'s greedy answers, drafted ``draft_length`` tokens at a time by ``drafter``, on the
    reference decoders.

    Args:
        verifier, drafter: loaded checkpoints (:func:`~textwm.models.checkpoint.load_model`); the verifier of the
            AR family, the drafter of any family, both of one tokenizer (every verifier token at the same id in the
            drafter's, which may add its own, such as a mask; the same stop ids).
        draft_length: tokens the drafter proposes per round (an SDAR drafter decodes them as one or two of its
            blocks, by the settings' ``block_length``).
    """

    def __init__(self, verifier: Any, drafter: Any, *, draft_length: int = 4, pad_token_id: int | None = None):
        super().__init__(verifier, drafter, draft_length=draft_length, pad_token_id=pad_token_id)
        self.drafter = reference_decoder(drafter.model, drafter.spec, pad_token_id=pad_token_id)
        self._cache: Any = None

    def _start(self, prompt: list[int]) -> torch.Tensor:
        # heavy: loads transformers
        from transformers import DynamicCache

        self._cache = DynamicCache()
        return self.model(input_ids=torch.tensor([prompt], device=self.device), past_key_values=self._cache,
                          use_cache=True).logits[0, -1]

    def _verify(self, context: list[int], draft: list[int]) -> torch.Tensor:
        feed = torch.tensor([context[-1:] + draft], device=self.device)
        return self.model(input_ids=feed, past_key_values=self._cache, use_cache=True).logits[0]

    def _keep(self, kept: int, drafted: int) -> None:
        if kept < drafted:                          # the bonus token is fed next round
            self._cache.crop(kept - drafted)        # a negative crop drops that many of the newest tokens

    def _propose(self, context: list[int], settings: DecodeSettings) -> Generation:
        (out,) = self.drafter.generate([context], settings)
        return out
