"""Token sampling for the decoders: temperature, top-k, top-p, confidence and entropy.

Conventions of :func:`sample` (AR and SDAR; REFERENCE.md "SDAR"): the caller sets banned logits
(the mask token) to -inf first; ``temperature == 0`` is greedy (argmax, confidence = softmax
probability of the argmax); otherwise logits are divided by the temperature, filtered by top-k then
top-p, and the token is drawn from the resulting distribution, whose probability of that token is
the confidence.

WeDLM samples in Tencent/WeDLM's order instead (:func:`sample_filter_first`, from
``wedlm/engine/sampler.py`` ``Sampler.sample_tokens``): top-k, then top-p on the *unscaled*
logits, then the temperature; and it scores positions by the entropy of the raw logits
(:func:`logits_entropy`, ``Sampler.compute_entropy``), not of the sampling distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampled:
    tokens: torch.Tensor       # [N] long
    confidence: torch.Tensor   # [N] probability of the chosen token
    probs: torch.Tensor        # [N, V] the distribution it was drawn from


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (``k <= 0``: keep all)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: the smallest set of top tokens whose probability reaches ``p`` (``p >= 1``: all)."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative > p
    drop_sorted[..., 1:] = drop_sorted[..., :-1].clone()  # keep the token that crosses p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample(logits: torch.Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> Sampled:
    """Sample one token per row of ``logits [N, V]`` (computed in float32)."""
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        scaled = top_p_filter(top_k_filter(logits / temperature, top_k), top_p)
        probs = torch.softmax(scaled, dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def sample_filter_first(logits: torch.Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0,
                        generator: torch.Generator | None = None) -> Sampled:
    """Sample one token per row of ``logits [N, V]`` in WeDLM's order (computed in float32).

    Tencent/WeDLM ``wedlm/engine/sampler.py`` ``Sampler.sample_tokens``: ``temperature == 0`` is
    the argmax of the softmax (top-k and top-p ignored); otherwise top-k, then top-p on the unscaled
    logits, then division by the temperature, then a draw. Top-p before the temperature differs from
    :func:`sample` whenever ``top_p < 1`` and ``temperature != 1`` (the nucleus is taken on a
    different distribution). ``probs`` is the distribution drawn from (greedy: the raw softmax).
    """
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)
        tokens = probs.argmax(dim=-1)
    else:
        probs = torch.softmax(top_p_filter(top_k_filter(logits, top_k), top_p) / temperature, dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def logits_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of ``softmax(logits)`` per row of ``logits [N, V]``, in float32.

    The entropy of the model's own distribution, before any temperature or filter (Tencent/WeDLM
    ``Sampler.compute_entropy``: ``Categorical(logits=...).entropy()``); ``-inf`` logits add 0.
    """
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return -(log_p.exp() * log_p.clamp(min=torch.finfo(log_p.dtype).min)).sum(dim=-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row of ``probs [N, V]`` over the full distribution."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL-style penalty (Keskar et al., 2019; HF ``RepetitionPenaltyLogitsProcessor``).

    Logits of tokens already in the context are divided by ``penalty`` when positive and
    multiplied by it when negative. ``logits [R, B, V]``, ``seen [R, V]`` bool.
    """
    if penalty == 1.0:
        return logits
    seen = seen[:, None, :].expand_as(logits)
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)
