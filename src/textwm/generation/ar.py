"""Left-to-right decoding of AR world models (HF ``generate`` with a KV cache), same interface
as :class:`~textwm.generation.sdar.SDARDecoder`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from textwm.generation.base import Decoder, Generation
from textwm.generation.settings import DecodeSettings


class ARDecoder(Decoder):
    family = "ar"

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                 gen_lengths: Sequence[int] | None = None) -> list[Generation]:
        """Greedy or sampled continuations; ``gen_lengths`` caps rows individually (the batch runs to the max)."""
        if not prompts:
            return []
        limits = list(gen_lengths) if gen_lengths is not None else [settings.gen_length] * len(prompts)
        dev = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long, device=dev)
        attention = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, device=dev)
            attention[i, width - len(p):] = 1
        sampling = settings.temperature > 0
        if settings.seed is not None:
            torch.manual_seed(settings.seed)
        out = self.model.generate(
            input_ids=ids, attention_mask=attention, max_new_tokens=max(limits), do_sample=sampling,
            temperature=settings.temperature if sampling else None, top_k=settings.top_k if sampling else None,
            top_p=settings.top_p if sampling else None, eos_token_id=list(self.spec.stop_ids) or None,
            repetition_penalty=settings.repetition_penalty if settings.repetition_penalty != 1.0 else None,
            pad_token_id=self.pad_id)
        new = out[:, width:].tolist()
        steps = len(new[0]) if new else 0
        results = []
        for row, limit in zip(new, limits):
            tokens, reason = [], "length"
            for tok in row[:limit]:
                if tok in self.spec.stop_ids:
                    reason = "stop"
                    break
                tokens.append(tok)
            results.append(Generation(token_ids=tokens, finish_reason=reason, num_forwards=steps))
        return results

