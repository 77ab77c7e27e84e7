"""The round loop of greedy speculative decoding (a masked-diffusion drafter, an AR verifier), what every pairing
shares: :class:`SpeculativeRounds`, its counters and the check that the pair shares a tokenizer.

The reference pairing is :class:`textwm.generation.speculative.SpeculativeDecoder` (its module says how a round
keeps the AR model's greedy answer); the engine's is
:class:`textwm.generation.engine.speculative.EngineSpeculativeDecoder`. This module sits below both, and below the
decoders, which import the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from textwm.generation.base import Decoder, Generation
from textwm.generation.settings import DecodeSettings
from textwm.models.families import get_family


@dataclass
class SpeculativeStats:
    """Counts over every row decoded so far."""

    generated: int = 0            # tokens of the answers (stop ids included where a row stopped)
    verifier_forwards: int = 0    # the verifier's forwards: each prompt's prefill (which gives the first token), rounds
    drafted: int = 0              # draft tokens proposed
    accepted: int = 0             # draft tokens kept
    drafter_forwards: int = 0     # the drafter's forwards, as its decoder counts them

    @property
    def tokens_per_verifier_forward(self) -> float:
        return self.generated / max(1, self.verifier_forwards)

    @property
    def acceptance(self) -> float:
        return self.accepted / max(1, self.drafted)


def _vocab(tokenizer: Any) -> dict[str, int]:
    return dict(tokenizer.get_vocab())


def check_pair(verifier: Any, drafter: Any, draft_length: int) -> None:
    """Refuse a pairing whose answers could not be the verifier's greedy ones: a non-AR verifier, a drafter of
    another tokenizer or other stop ids, a draft length below 1 (``verifier``, ``drafter``: loaded checkpoints)."""
    if get_family(verifier.spec.family).masked:
        raise ValueError(f"the verifier must be an AR model, got a {verifier.spec.family} one")
    if draft_length < 1:
        raise ValueError(f"draft_length must be >= 1, got {draft_length}")
    theirs = _vocab(drafter.tokenizer)
    differ = [t for t, i in _vocab(verifier.tokenizer).items() if theirs.get(t) != i]
    if differ:
        raise ValueError(f"the drafter's tokenizer is not the verifier's ({len(differ)} of the verifier's tokens "
                         f"have another id there or none, e.g. {differ[0]!r}): a draft must be read in the "
                         "verifier's tokens")
    if tuple(verifier.spec.stop_ids) != tuple(drafter.spec.stop_ids):
        raise ValueError(f"the drafter's stop ids {list(drafter.spec.stop_ids)} are not the verifier's "
                         f"{list(verifier.spec.stop_ids)}")


class SpeculativeRounds(Decoder):
    """The round loop over a verifier and a drafter; subclasses say how each reads and keeps its context.

    A subclass implements :meth:`_start` (the verifier's prefill of a prompt: its first token's logits),
    :meth:`_verify` (the verifier's logits after the context's last token and after each draft token),
    :meth:`_keep` (the verifier's cache told how many draft tokens were kept) and :meth:`_propose` (the drafter's
    greedy next tokens of a context, and the forwards it took).
    """

    family = "ar"

    def __init__(self, verifier: Any, drafter: Any, *, draft_length: int, pad_token_id: int | None = None):
        check_pair(verifier, drafter, draft_length)
        super().__init__(verifier.model, verifier.spec, pad_token_id=pad_token_id)
        self.draft_length = draft_length
        #: Ids the verifier can read: a drafter may add tokens of its own (the diffusion models' mask).
        self.verifier_ids = verifier.model.get_input_embeddings().num_embeddings
        self.stats = SpeculativeStats()

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        """Greedy answers of the verifier, one row after another (``settings.temperature`` must be 0)."""
        if settings.temperature != 0 or settings.repetition_penalty != 1.0:
            raise ValueError("speculative decoding here is greedy and without a repetition penalty (its answers "
                             "are the verifier's greedy ones): set temperature 0 and repetition_penalty 1")
        limits = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * len(prompts)
        if any(not p for p in prompts):
            raise ValueError("an empty prompt: the verifier needs at least one token to continue")
        return [self._one(list(p), limit, settings) for p, limit in zip(prompts, limits)]

    def _one(self, prompt: list[int], limit: int, settings: DecodeSettings) -> Generation:
        stops = set(self.spec.stop_ids)
        # The prefill gives the first token, as an AR decoder's does; from then on the verifier holds every context
        # token but the last, which each round feeds with its draft.
        first = int(self._start(prompt).argmax())
        forwards = 1
        context, answer = [*prompt, first], [first] if limit > 0 else []
        while len(answer) < limit and answer[-1] not in stops:
            draft = self._draft(context, min(self.draft_length, limit - len(answer)), settings)
            choice = self._verify(context, draft).argmax(dim=-1).tolist()   # the verifier's token after each fed one
            forwards += 1
            kept = 0
            while kept < len(draft) and draft[kept] == choice[kept] and draft[kept] not in stops:
                kept += 1
            self._keep(kept, len(draft))
            new = [*draft[:kept], choice[kept]]
            self.stats.drafted += len(draft)
            self.stats.accepted += kept
            context += new
            for token in new:
                if len(answer) == limit:
                    break
                answer.append(token)
                if token in stops:
                    break
        self.stats.generated += len(answer)
        self.stats.verifier_forwards += forwards
        stopped = bool(answer) and answer[-1] in stops
        return Generation(token_ids=answer[:-1] if stopped else answer, finish_reason="stop" if stopped else "length",
                          num_forwards=forwards)

    def _draft(self, context: list[int], k: int, settings: DecodeSettings) -> list[int]:
        """The drafter's greedy next ``k`` tokens of ``context`` (fewer where it stops: then its stop id last), up to
        the first the verifier cannot read."""
        draft_settings = dataclasses.replace(settings, gen_length=k, temperature=0.0, seed=None)
        out = self._propose(context, draft_settings)
        self.stats.drafter_forwards += out.num_forwards
        tokens = out.token_ids[:k]
        if out.finish_reason == "stop" and len(tokens) < k and self.spec.stop_ids:
            tokens.append(self.spec.stop_ids[0])
        readable = next((i for i, t in enumerate(tokens) if t >= self.verifier_ids), len(tokens))
        return tokens[:readable]

    def _start(self, prompt: list[int]) -> torch.Tensor:
        """Prefill ``prompt`` into the verifier's cache; the logits ``[V]`` after its last token."""
        raise NotImplementedError

    def _verify(self, context: list[int], draft: list[int]) -> torch.Tensor:
        """One verifier forward of ``context``'s last token and ``draft``: logits ``[1 + len(draft), V]``."""
        raise NotImplementedError

    def _keep(self, kept: int, drafted: int) -> None:
        """The verifier keeps the K/V of the context and the first ``kept`` of ``drafted`` draft tokens."""
        raise NotImplementedError

    def _propose(self, context: list[int], settings: DecodeSettings) -> Generation:
        """The drafter's greedy continuation of ``context`` (``settings.gen_length`` tokens at most)."""
        raise NotImplementedError
