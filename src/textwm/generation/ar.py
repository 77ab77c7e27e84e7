"""Left-to-right decoding of AR world models (HF ``generate`` with a KV cache), same interface
as :class:`~textwm.generation.sdar.SDARDecoder`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from textwm.generation.anchors import AnchoredAnswer, Layout, answer
from textwm.generation.base import Decoder, Generation
from textwm.generation.sampling import apply_repetition_penalty, sample
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


    @torch.no_grad()
    def generate_anchored(self, prompts: Sequence[Sequence[int]], layouts: Sequence[Layout],
                          settings: DecodeSettings, decode: Callable[[list[int]], str]) -> list[AnchoredAnswer]:
        """Fill each row's template (:mod:`textwm.generation.anchors`) left to right, one row at a time.

        An AR model sees only what precedes a position: each fixed span is forced when it comes, and a slot is
        generated until N tokens, a stop id (the end of the slot; of the answer in an open last slot), or the
        next fixed span's first token (the span is then forced from there, so it is never written twice).
        """
        # heavy: loads transformers
        from transformers import DynamicCache

        if len(layouts) != len(prompts):
            raise ValueError("every prompt needs a layout")
        gen = (torch.Generator(device=self.device).manual_seed(settings.seed) if settings.seed is not None
               else None)
        stops = set(self.spec.stop_ids)
        results = []
        for prompt, layout in zip(prompts, layouts):
            cache, pending, forwards = DynamicCache(), list(prompt), 0
            seen = torch.zeros((1, self.model.get_output_embeddings().weight.shape[0]), dtype=torch.bool,
                               device=self.device)
            slots, finish = [], "stop"
            parts = layout.template.parts
            for k, (part, (start, end)) in enumerate(zip(parts, layout.spans)):
                if isinstance(part, str):
                    pending += [t for t in layout.fixed[start:end] if t is not None]
                    continue
                following = layout.fixed[end] if k + 1 < len(parts) and end < len(layout) else None
                tokens = []
                for _ in range(end - start):
                    seen[0, torch.tensor(pending, device=self.device)] = True
                    ids = torch.tensor([pending], device=self.device)
                    logits = self.model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1]
                    forwards += 1
                    if settings.repetition_penalty != 1.0:
                        logits = apply_repetition_penalty(logits[:, None], seen, settings.repetition_penalty)[:, 0]
                    tok = int(sample(logits, temperature=settings.temperature, top_k=settings.top_k,
                                     top_p=settings.top_p, generator=gen).tokens[0])
                    if tok in stops or tok == following:
                        pending = []
                        break
                    tokens.append(tok)
                    pending = [tok]
                else:
                    if part is None:
                        finish = "length"
                slots.append(tokens)
            results.append(answer(layout, slots, decode, finish, forwards))
        return results
