"""Which masked positions of a block to fill at one denoising step (the remasking strategies).

All functions work on a batch of blocks ``[R, B]`` and take ``k [R]``, the number of tokens the
schedule transfers this step for each row, already clamped to that row's masks left. Ties in a
score go to the leftmost position (stable sort), in the decoder and in its reference alike.

* ``sequential``: the next ``k`` masks from the left;
* ``low_confidence_static``: the ``k`` masks of highest confidence;
* ``low_confidence_dynamic``: every mask above ``confidence_threshold`` if there are at least
  ``k`` of them, else the top ``k`` (JetAstra/SDAR ``generate.py``);
* ``entropy_bounded``: the EB-sampler rule (Ben-Hamu et al., 2025): masks in order of increasing
  entropy of their *full* predictive distribution, as many as keep ``sum(H) - max(H) <=
  entropy_budget``, and never fewer than ``k`` so the block finishes within its steps. (Upstream
  SDAR's version uses the sampled token's probability instead of the distribution's entropy.)
"""

from __future__ import annotations

import torch

from textwm.generation import STRATEGIES

__all__ = ["STRATEGIES", "select_transfer", "transfer_schedule"]


def transfer_schedule(block_length: int, steps: int) -> list[int]:
    """Tokens to transfer at each step: ``block_length // steps``, remainder on the first steps."""
    if steps < 1:
        raise ValueError(f"denoising steps must be >= 1, got {steps}")
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def _top_by_score(score: torch.Tensor, is_mask: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per row, the ``count`` masked positions of highest ``score`` (leftmost wins ties)."""
    score = score.masked_fill(~is_mask, float("-inf"))
    order = torch.sort(score, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return is_mask & (rank < count[:, None])


def select_transfer(strategy: str, is_mask: torch.Tensor, confidence: torch.Tensor, k: torch.Tensor, *,
                    confidence_threshold: float = 0.85, entropy: torch.Tensor | None = None,
                    entropy_budget: float = 0.5) -> torch.Tensor:
    """Positions to fill this step: ``[R, B]`` bool, a subset of ``is_mask``.

    Args:
        is_mask: ``[R, B]`` positions still masked.
        confidence: ``[R, B]`` probability of each position's sampled token.
        k: ``[R]`` scheduled count per row (clamped to the row's masks).
        entropy: ``[R, B]`` predictive entropy (``entropy_bounded`` only).
    """
    if strategy == "sequential":
        return is_mask & (is_mask.long().cumsum(dim=-1) <= k[:, None])
    if strategy == "low_confidence_static":
        return _top_by_score(confidence, is_mask, k)
    if strategy == "low_confidence_dynamic":
        high = is_mask & (confidence > confidence_threshold)
        enough = high.sum(dim=-1) >= k
        return torch.where(enough[:, None], high, _top_by_score(confidence, is_mask, k))
    if strategy == "entropy_bounded":
        if entropy is None:
            raise ValueError("entropy_bounded needs the entropy of each position")
        h = entropy.masked_fill(~is_mask, float("inf"))
        sorted_h = torch.sort(h, dim=-1, stable=True).values
        # Sorted ascending, the max of the first j+1 is the (j+1)-th: admit j while sum - max <= budget.
        slack = torch.nan_to_num(sorted_h.cumsum(dim=-1) - sorted_h, nan=float("inf"))
        count = (slack <= entropy_budget).sum(dim=-1)
        count = torch.maximum(count, k).minimum(is_mask.sum(dim=-1))
        return _top_by_score(-entropy, is_mask, count)
    raise ValueError(f"unknown remasking strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
