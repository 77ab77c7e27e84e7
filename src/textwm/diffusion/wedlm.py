"""WeDLM training maths (Tencent/WeDLM ``finetune/``).

WeDLM recovers masked tokens under *causal* attention by topological reordering. Per sample:

1. blocks of ``block_size`` tokens count from the sample's position 0 (prompt included); in each
   block, ``gamma ~ U(0, 1)`` and exactly ``round(gamma * n)`` of its ``n`` answer tokens are masked
   (prompt tokens never are);
2. the model sees two streams, ``[x0, xt]``: ``x0`` the clean sample, ``xt`` the prediction
   stream, in which each block is laid out observed tokens first, then its masks, every slot keeping
   its logical position id (RoPE);
3. attention (:func:`wedlm_mask_mod`): inside a block and a stream, causal by physical order;
   ``xt`` queries also see the clean ``x0`` keys of earlier blocks; ``x0`` is ordinary causal;
4. loss: at each ``xt`` mask slot, cross-entropy against the token at that slot (no shift) weighted
   ``1 / gamma``; on ``x0``, the shifted next-token loss over answer tokens; total
   ``(mlm + w * ar) / (1 + w)`` with ``w = 1``.

Normalisation, two options (``SFTConfig.wedlm_loss_normalisation``):

* ``step_tokens`` (default, :func:`wedlm_loss`): both terms summed and divided by the answer tokens
  of the whole optimisation step (``num_items_in_batch``), as the other objectives do, so gradient
  accumulation and data parallelism give exactly the gradient of one large batch.
  ``E[sum of 1/gamma over a block's masks] = n``, so the MLM term has the same expected scale as
  upstream's;
* ``micro_batch`` (:func:`wedlm_loss_per_micro_batch`): Tencent/WeDLM's own
  (``finetune/src/loss.py`` ``compute_mlm_loss`` with ``weighting_scheme="weighted"`` and
  ``compute_ar_loss``): each micro-batch's MLM term is its weighted mean (divided by its sum of
  ``1 / (gamma + eps)`` weights), its AR term the mean over its answer tokens; the step's gradient
  is the mean over micro-batches (accelerate's ``backward(loss / accumulation)``, DDP's average).
  A micro-batch with few masks weighs as much as one with many, so the gradient changes with how a
  step is split into micro-batches and ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from textwm.diffusion.masks import PAD_SAMPLE, MaskMod

#: WeDLM's default block size (``finetune/configs``): masking ratios are drawn per block of 32.
DEFAULT_BLOCK_SIZE = 32
#: Weight of the AR term (WeDLM: ``ar_loss_weight: 1.0``).
AR_LOSS_WEIGHT = 1.0
#: Upstream's ``mask_eps`` (``finetune/src/config.py``): its MLM weights are ``1 / (gamma + eps)``.
UPSTREAM_WEIGHT_EPS = 1e-8


def sample_block_noise(answer: torch.Tensor, positions: torch.Tensor, block_size: int,
                       seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of one sample, from its own seed (independent of batching and devices).

    Args:
        answer: ``[n]`` bool, True at answer positions (labels != -100).
        positions: ``[n]`` position ids of the sample (0 at its first token).
        block_size: tokens per block.
        seed: the sample's noise seed.

    Returns:
        ``(masked [n] bool, gamma [n] float)``: masked positions (``round(gamma_b * n_b)`` of the
        ``n_b`` answer tokens of each block ``b``) and the masking ratio of each position's block.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks = positions // block_size
    num_blocks = int(blocks.max()) + 1 if len(blocks) else 0
    ratios = torch.rand(num_blocks, generator=gen)
    masked = torch.zeros_like(answer)
    for b in range(num_blocks):
        candidates = (answer & (blocks == b)).nonzero(as_tuple=True)[0]
        count = round(len(candidates) * float(ratios[b]))
        if count:
            masked[candidates[torch.randperm(len(candidates), generator=gen)[:count]]] = True
    return masked, ratios[blocks] if num_blocks else torch.ones(answer.shape)


def reorder_within_blocks(masked: torch.Tensor, positions: torch.Tensor, sample_ids: torch.Tensor,
                          block_size: int) -> torch.Tensor:
    """The ``xt`` layout: per (sample, block), observed slots first, then masks, each in order.

    Args:
        masked: ``[B, L]`` bool; positions/sample_ids: ``[B, L]`` (a packed row holds several
            samples, each contiguous, positions restarting at 0).

    Returns:
        ``order [B, L]`` long: ``xt[b, j] = x[b, order[b, j]]``.
    """
    group = (positions // block_size).clone()
    new_group = torch.ones_like(masked)
    new_group[:, 1:] = (group[:, 1:] != group[:, :-1]) | (sample_ids[:, 1:] != sample_ids[:, :-1])
    group_index = new_group.long().cumsum(dim=1)
    key = group_index * 2 + masked.long()
    return torch.argsort(key, dim=1, stable=True)


def wedlm_mask_mod(position_ids: torch.Tensor, sample_ids: torch.Tensor, block_size: int, clean_len: int) -> MaskMod:
    """The WeDLM training rule over ``[x0, xt]`` (indices ``< clean_len`` are the clean ``x0``).

    Query ``q`` may see key ``k`` iff both are in the same sample and one of:

    * same stream, same block and ``k <= q`` (causal by physical order inside a block);
    * ``k`` clean and ``block(k) < block(q)`` (earlier blocks, clean, for either stream).

    The clean stream is thereby ordinary causal attention within its sample.

    Args:
        position_ids: ``[B, L + N]`` logical positions (``xt`` reordered, positions kept; ``N = L`` or only
            the blocks with a mask, :mod:`textwm.diffusion.noisy_stream`).
        sample_ids: ``[B, L + N]``; :data:`PAD_SAMPLE` for padding.
    """
    def mask_mod(b, h, q_idx, kv_idx):
        sid_q = sample_ids[b, q_idx]
        same_sample = (sid_q == sample_ids[b, kv_idx]) & (sid_q != PAD_SAMPLE)
        block_q = position_ids[b, q_idx] // block_size
        block_k = position_ids[b, kv_idx] // block_size
        same_stream = (q_idx >= clean_len) == (kv_idx >= clean_len)
        inside_block = same_stream & (block_q == block_k) & (kv_idx <= q_idx)
        earlier_clean = (kv_idx < clean_len) & (block_k < block_q)
        return same_sample & (inside_block | earlier_clean)
    return mask_mod


def wedlm_loss(mlm_logits: torch.Tensor, mlm_targets: torch.Tensor, gamma: torch.Tensor, ar_logits: torch.Tensor,
               ar_targets: torch.Tensor, num_answer_tokens: torch.Tensor | int,
               ar_weight: float = AR_LOSS_WEIGHT) -> torch.Tensor:
    """``(mlm + w * ar) / (1 + w)``, both terms summed and divided by the step's answer tokens.

    Args:
        mlm_logits: ``[M, V]`` at the ``xt`` mask slots; mlm_targets ``[M]``; gamma ``[M]`` the
            masking ratio of each slot's block.
        ar_logits: ``[N, V]`` at clean positions whose next token is an answer token; ar_targets ``[N]``.
        num_answer_tokens: answer tokens of the whole optimisation step (all micro-batches, ranks).
    """
    mlm_ce, ar_ce = _ce(mlm_logits, mlm_targets), _ce(ar_logits, ar_targets)
    return wedlm_loss_from_ce(mlm_ce, gamma, ar_ce, num_answer_tokens, ar_weight=ar_weight)


def wedlm_loss_per_micro_batch(mlm_logits: torch.Tensor, mlm_targets: torch.Tensor, gamma: torch.Tensor,
                               ar_logits: torch.Tensor, ar_targets: torch.Tensor,
                               ar_weight: float = AR_LOSS_WEIGHT) -> torch.Tensor:
    """Tencent/WeDLM's loss of one micro-batch: ``(mlm + w * ar) / (1 + w)``, each term normalised on its own.

    ``mlm = sum(ce * weight) / sum(weight)`` with ``weight = 1 / (gamma + eps)`` over the micro-batch's
    mask slots (``finetune/src/loss.py`` ``compute_mlm_loss``, ``weighting_scheme="weighted"``);
    ``ar`` the mean ``ce`` over its answer tokens (``compute_ar_loss``); an empty term is 0
    (``trainer.py`` ``train_step``). Shapes as in :func:`wedlm_loss`. The caller averages micro-batches.
    """
    mlm_ce, ar_ce = _ce(mlm_logits, mlm_targets), _ce(ar_logits, ar_targets)
    return wedlm_loss_per_micro_batch_from_ce(mlm_ce, gamma, ar_ce, ar_weight=ar_weight)


def _ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[N, V], [N] -> [N]`` float32 per-token cross-entropy."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


# The weighting and normalisation, from per-token CE: shared by the logits path above and the chunked
# one (textwm.training.linear_ce.linear_cross_entropy, which never forms the logits).

def wedlm_loss_from_ce(mlm_ce: torch.Tensor, gamma: torch.Tensor, ar_ce: torch.Tensor,
                       num_answer_tokens: torch.Tensor | int, ar_weight: float = AR_LOSS_WEIGHT) -> torch.Tensor:
    """:func:`wedlm_loss` from the per-token CE: ``mlm_ce [M]`` at the mask slots, ``ar_ce [N]`` (float32)."""
    return ((mlm_ce / gamma).sum() + ar_weight * ar_ce.sum()) / (1.0 + ar_weight) / num_answer_tokens


def wedlm_loss_per_micro_batch_from_ce(mlm_ce: torch.Tensor, gamma: torch.Tensor, ar_ce: torch.Tensor,
                                       ar_weight: float = AR_LOSS_WEIGHT) -> torch.Tensor:
    """:func:`wedlm_loss_per_micro_batch` from the per-token CE ``mlm_ce [M]``, ``ar_ce [N]`` (float32)."""
    zero = (mlm_ce.sum() + ar_ce.sum()) * 0.0          # keeps the graph when a term is empty
    mlm = ar = zero
    if len(mlm_ce):
        weight = 1.0 / (gamma.float() + UPSTREAM_WEIGHT_EPS)
        mlm = (mlm_ce * weight).sum() / weight.sum()
    if len(ar_ce):
        ar = ar_ce.mean()
    return (mlm + ar_weight * ar) / (1.0 + ar_weight)
