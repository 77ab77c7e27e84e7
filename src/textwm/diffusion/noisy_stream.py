"""Which part of the noisy copy a block-diffusion training step needs to compute.

SDAR trains on ``[x_t, x_0]`` and WeDLM on ``[x_0, x_t]``: a noisy copy beside the clean sequence. Under
both attention rules (:func:`textwm.diffusion.masks.sdar_mask_mod`, :func:`textwm.diffusion.wedlm.wedlm_mask_mod`)
a noisy token is seen only by noisy tokens of its own (sample, block); the clean stream never looks at the
noisy one. A noisy block with no masked token therefore carries no loss and changes no other output, and
leaving it out gives the same loss and gradients exactly.

In SFT only answer tokens are masked, so the noisy copy shrinks to the answer's blocks: for world-model
rows (a long prompt, an observation of a few dozen tokens) the step computes ``L + ~answer`` tokens
instead of ``2L``, nearly halving the diffusion objectives' compute and activations.
"""

from __future__ import annotations

import torch

from textwm.diffusion.masks import PAD_SAMPLE

#: The kept length is rounded up to a multiple of this (tensor-core friendly shapes, fewer distinct shapes).
ROUND_TO = 8


def length_multiple(attn_implementation: str) -> int:
    """What the noisy copy's length is rounded up to: flex attention works in 128-token tiles."""
    return 128 if attn_implementation == "flex_attention" else ROUND_TO


def blocks_with_a_mask(masked: torch.Tensor, position_ids: torch.Tensor, sample_ids: torch.Tensor,
                       block_size: int) -> torch.Tensor:
    """``[B, L]`` bool: the token's (sample, block) holds at least one masked token.

    Args:
        masked: ``[B, L]`` bool, the noise; position_ids / sample_ids: ``[B, L]`` (a packed row holds
            several samples, each contiguous, positions restarting at 0; padding has :data:`PAD_SAMPLE`).
    """
    block = position_ids // block_size
    starts = torch.ones_like(masked)
    starts[:, 1:] = (block[:, 1:] != block[:, :-1]) | (sample_ids[:, 1:] != sample_ids[:, :-1])
    group = starts.long().cumsum(dim=1) - 1                                     # [B, L] 0-based (sample, block)
    counts = torch.zeros_like(group).scatter_add_(1, group, masked.long())      # masked tokens per group
    return (counts.gather(1, group) > 0) & (sample_ids != PAD_SAMPLE)


def kept_index(keep: torch.Tensor, multiple: int = ROUND_TO) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept positions of each row, in order, padded to one length.

    Args:
        keep: ``[B, L]`` bool.
        multiple: the length ``N`` is the most kept positions of a row rounded up to this (at most ``L``).

    Returns:
        ``(index [B, N] long, valid [B, N] bool)``: ``index[b, :count_b]`` are row b's kept positions in
        order; the rest point at unkept positions and are marked invalid (give them :data:`PAD_SAMPLE`).
    """
    length = keep.shape[1]
    counts = keep.sum(dim=1)
    most = max(1, int(counts.max()))                     # one host sync a step
    n = min(length, -(-most // multiple) * multiple)
    index = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :n]
    valid = torch.arange(n, device=keep.device)[None, :] < counts[:, None]
    return index, valid
