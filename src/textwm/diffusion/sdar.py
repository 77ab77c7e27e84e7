"""SDAR block-diffusion training maths (JetAstra/SDAR's LlamaFactory fork; REFERENCE.md "SDAR").

Per sample:

1. the answer is right-padded with pad tokens to a multiple of the block size, and the padding is
   part of the labels (the model learns to fill the tail of its last block);
2. one noise level ``t ~ U(0, 1)``, ``p = (1 - eps) t + eps``; each answer token is masked
   independently with probability ``p`` (at least one); prompt tokens never are;
3. the model sees ``[x_t, x_0]`` with the same position ids in both copies and the mask rule of
   :func:`textwm.diffusion.masks.sdar_mask_mod`;
4. loss = sum over masked positions of ``CE(logits_i, x_i) / p``, divided by the number of answer
   tokens (labels != -100, padding included). No logit shift: position ``i`` predicts token ``i``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Lower bound of the masking probability (SDAR: eps = 1e-3), so 1/p stays bounded.
MASK_EPS = 1e-3
IGNORE_INDEX = -100


def block_pad_length(length: int, block_size: int) -> int:
    """Tokens to append so that ``length`` becomes a multiple of ``block_size``."""
    return (-length) % block_size


def sample_noise(answer: torch.Tensor, seed: int, eps: float = MASK_EPS) -> tuple[torch.Tensor, float]:
    """Masks for one sample, from its own seed (so noise does not depend on batching or devices).

    Args:
        answer: ``[n]`` bool, True at the sample's answer positions (labels != -100).
        seed: the sample's noise seed.

    Returns:
        ``(masked [n] bool, p)``: masked answer positions (at least one if there is an answer
        token) and the sample's masking probability.
    """
    gen = torch.Generator().manual_seed(seed)
    t = torch.rand((), generator=gen).item()
    p = (1.0 - eps) * t + eps
    masked = (torch.rand(answer.shape, generator=gen) < p) & answer
    if answer.any() and not masked.any():
        candidates = answer.nonzero(as_tuple=True)[0]
        masked[candidates[torch.randint(len(candidates), (), generator=gen)]] = True
    return masked, p


def double_input(noisy_ids: torch.Tensor, clean_ids: torch.Tensor, position_ids: torch.Tensor,
                 sample_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[x_t, x_0]`` along the sequence: ids, position ids and sample ids, each ``[B, 2L]``."""
    return (torch.cat([noisy_ids, clean_ids], dim=1), torch.cat([position_ids, position_ids], dim=1),
            torch.cat([sample_ids, sample_ids], dim=1))


def masked_diffusion_loss(logits: torch.Tensor, targets: torch.Tensor, mask_prob: torch.Tensor,
                          num_answer_tokens: torch.Tensor | int) -> torch.Tensor:
    """``sum_i CE(logits_i, targets_i) / p_i`` over the given (masked) positions, / answer tokens.

    Args:
        logits: ``[N, V]`` at the N masked positions (computed in float32 here).
        targets: ``[N]`` clean tokens at those positions.
        mask_prob: ``[N]`` masking probability of each position's sample.
        num_answer_tokens: answer tokens of the whole optimisation step (all micro-batches and
            ranks), so the loss is correct under gradient accumulation and data parallelism.
    """
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    return (ce / mask_prob).sum() / num_answer_tokens
