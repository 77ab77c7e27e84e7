"""SDAR block-diffusion training maths (JetAstra/SDAR's LlamaFactory fork).

Per packed sample:

1. the answer is right-padded with pad tokens to a multiple of the block size, and the padding is
   part of the labels (the model learns to fill the tail of its last block);
2. one noise level ``t ~ U(0, 1)``, ``p = (1 - eps) t + eps``; each answer token is masked
   independently with probability ``p``; prompt tokens never are (the row rule below);
3. the model sees ``[x_t, x_0]`` with the same position ids in both copies and the mask rule of
   :func:`textwm.diffusion.masks.sdar_mask_mod`;
4. loss = sum over masked positions of ``CE(logits_i, x_i) / p``, divided by the number of answer
   tokens (labels != -100, padding included). No logit shift: position ``i`` predicts token ``i``.

The "at least one mask" rule is per packed *row*, as upstream's
``forward_add_noise_packed`` (``training/model/SDAR-*-Chat/modeling_sdar.py``) does it: every
sample of the row draws its ``t`` and masks; if the whole row masks no answer token, all of its
samples draw again (up to :data:`MAX_NOISE_TRIES` = 10 draws); if the tenth draw is still empty, one
answer token of the row, chosen uniformly, is masked at the ``p`` of its sample's last draw. A row
with no answer token is left unmasked. Each sample draws from its own generator, seeded by its noise
seed, and a redraw continues that generator's stream, so the noise depends only on the row's seeds:
not on batching, accumulation, devices or ranks.

Bias of the ``1/p`` weights (``E[sum of 1/p over masked tokens] / n``, 1 would be unbiased). Without
the rule, ``E = 1`` exactly (a token is masked with probability ``p`` and weighted ``1/p``). A
redraw conditions on "the row masks something", which multiplies the weights by ``1 / (1 - q)``,
``q = prod_s E_t[(1 - p)^{n_s}] = prod_s (1 - eps)^{n_s} / (n_s + 1)`` over the row's samples of
``n_s`` answer tokens (the forced token after ten empty draws adds ``O(q^10)``). So:

* a packed row of several samples is unbiased to within ``q`` (4 samples of 16 answer tokens:
  ``q = 1.1e-5``);
* a row holding one short sample is itself biased: ``1 / (1 - q) = 1.061`` at 16 answer tokens,
  ``1.030`` at 32, ``1.015`` at 64 (``~ (n + 1) / n``). This is upstream's behaviour, kept and
  measured in ``tests/diffusion/test_sdar_objective.py``.

The earlier rule here (force one token at the same ``p`` whenever a *sample* masked nothing) added
``E[1{nothing masked} / p] / n``, large because small ``p`` dominates: 1.22 at 16 answer tokens,
1.09 at 32, 1.035 at 64, for every sample of every row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

#: Lower bound of the masking probability (SDAR: eps = 1e-3), so 1/p stays bounded.
MASK_EPS = 1e-3
IGNORE_INDEX = -100
#: Draws of a row's noise before one token is forced (SDAR ``forward_add_noise_packed(max_tries=10)``).
MAX_NOISE_TRIES = 10


def block_pad_length(length: int, block_size: int) -> int:
    """Tokens to append so that ``length`` becomes a multiple of ``block_size``."""
    return (-length) % block_size


def _draw(answer: torch.Tensor, gen: torch.Generator, eps: float) -> tuple[torch.Tensor, float]:
    """One draw for one sample: ``t`` then one uniform per position; ``(masked [n] bool, p)``."""
    t = torch.rand((), generator=gen).item()
    p = (1.0 - eps) * t + eps
    return (torch.rand(answer.shape, generator=gen) < p) & answer, p


def sample_row_noise(answers: Sequence[torch.Tensor], seeds: Sequence[int], eps: float = MASK_EPS,
                     max_tries: int = MAX_NOISE_TRIES) -> list[tuple[torch.Tensor, float]]:
    """Masks of the samples of one packed row, by upstream's row rule (module docstring).

    Args:
        answers: per sample, ``[n_s]`` bool, True at its answer positions (labels != -100).
        seeds: per sample, its noise seed.
        eps: lower bound of ``p``.
        max_tries: draws before one token is forced.

    Returns:
        per sample, ``(masked [n_s] bool, p)``: at least one answer token of the row is masked
        (none if the row has no answer token).
    """
    if len(answers) != len(seeds):
        raise ValueError(f"{len(answers)} samples but {len(seeds)} noise seeds in one row")
    gens = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
    draws = [_draw(a, g, eps) for a, g in zip(answers, gens)]
    if not any(bool(a.any()) for a in answers):
        return draws
    for _ in range(max_tries - 1):
        if any(bool(m.any()) for m, _ in draws):
            return draws
        draws = [_draw(a, g, eps) for a, g in zip(answers, gens)]
    if not any(bool(m.any()) for m, _ in draws):
        # Forced token: uniform over the row's answer positions, drawn from the first sample's stream.
        where = [(s, int(i)) for s, a in enumerate(answers) for i in a.nonzero(as_tuple=True)[0]]
        s, i = where[int(torch.randint(len(where), (), generator=gens[0]))]
        draws[s][0][i] = True
    return draws


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
    return masked_diffusion_loss_from_ce(ce, mask_prob, num_answer_tokens)


def masked_diffusion_loss_from_ce(ce: torch.Tensor, mask_prob: torch.Tensor,
                                  num_answer_tokens: torch.Tensor | int) -> torch.Tensor:
    """:func:`masked_diffusion_loss` from the per-token CE ``[N]`` (float32) of the masked positions.

    Shared by both loss implementations: the logits path above and the chunked one
    (:func:`textwm.training.linear_ce.linear_cross_entropy`), which never forms the logits.
    """
    return (ce / mask_prob).sum() / num_answer_tokens
