"""Attention-mask rules as predicates, materialised dense (SDPA, CPU) or as a flex ``BlockMask`` (GPU).

A rule is a ``mask_mod(b, h, q_idx, kv_idx) -> bool`` over tensors, the signature of PyTorch's
flex attention. The same function builds both backends: flex calls it per (b, h, q, kv); the
dense path calls it once with broadcast index grids. True = query ``q`` may attend to key ``kv``.

Dense masks cost B·Q·K bytes (an SDAR row of 20k tokens with its whole noisy copy, 40k: ~1.6 GB), so
they are for CPU runs and tests; GPU training uses flex attention, whose block mask is sparse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import create_block_mask

log = logging.getLogger(__name__)

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: Sample id of padding positions (a packed row's unused tail, batch padding).
PAD_SAMPLE = -1


def packed_causal_mask_mod(sample_ids: torch.Tensor) -> MaskMod:
    """Causal attention within each packed sample (the AR objective).

    Args:
        sample_ids: ``[B, L]`` sample index of every position, :data:`PAD_SAMPLE` for padding.
    """
    def mask_mod(b, h, q_idx, kv_idx):
        sid_q = sample_ids[b, q_idx]
        return (sid_q == sample_ids[b, kv_idx]) & (sid_q != PAD_SAMPLE) & (kv_idx <= q_idx)
    return mask_mod


def sdar_mask_mod(position_ids: torch.Tensor, sample_ids: torch.Tensor, block_size: int, noisy_len: int) -> MaskMod:
    """The SDAR training rule over ``[x_t, x_0]`` (JetAstra/SDAR's LlamaFactory fork).

    Query ``q`` may see key ``k`` iff both are in the same sample and one of:

    * same block and same copy (bidirectional inside a block);
    * ``q`` noisy, ``k`` clean, ``block(k) < block(q)`` (earlier blocks, as committed context);
    * ``q`` clean, ``k`` clean, ``block(k) <= block(q)`` (the clean copy is block-causal).

    Blocks count from each sample's position 0 (``block = position_id // block_size``).

    Args:
        position_ids: ``[B, N + L]``; a noisy token carries its clean twin's position id.
        sample_ids: ``[B, N + L]``; :data:`PAD_SAMPLE` for padding.
        block_size: tokens per block.
        noisy_len: ``N``: indices ``< N`` are the noisy copy ``x_t`` (every block, ``N = L``, or only some,
            :mod:`textwm.diffusion.noisy_stream`), the rest the clean ``x_0``.
    """
    def mask_mod(b, h, q_idx, kv_idx):
        sid_q = sample_ids[b, q_idx]
        same_sample = (sid_q == sample_ids[b, kv_idx]) & (sid_q != PAD_SAMPLE)
        block_q = position_ids[b, q_idx] // block_size
        block_k = position_ids[b, kv_idx] // block_size
        q_clean = q_idx >= noisy_len
        k_clean = kv_idx >= noisy_len
        inside_block = (block_q == block_k) & (q_clean == k_clean)
        noisy_sees_past = ~q_clean & k_clean & (block_k < block_q)
        clean_sees_past = q_clean & k_clean & (block_k <= block_q)
        return same_sample & (inside_block | noisy_sees_past | clean_sees_past)
    return mask_mod


def dense_mask(mask_mod: MaskMod, batch: int, q_len: int, kv_len: int, device) -> torch.Tensor:
    """Evaluate a rule on the full grid: ``[B, 1, Q, K]`` bool.

    A query that may see nothing (padding) is allowed to see itself, so that SDPA's softmax over
    an all-masked row does not produce NaN; its output is never used.
    """
    b = torch.arange(batch, device=device)[:, None, None]
    q = torch.arange(q_len, device=device)[None, :, None]
    kv = torch.arange(kv_len, device=device)[None, None, :]
    mask = mask_mod(b, None, q, kv).expand(batch, q_len, kv_len).clone()
    empty = ~mask.any(dim=-1)
    if empty.any():
        rows = empty.nonzero(as_tuple=True)
        diag = rows[1].clamp(max=kv_len - 1)
        mask[rows[0], rows[1], diag] = True
    return mask[:, None]


def flex_block_mask(mask_mod: MaskMod, batch: int, q_len: int, kv_len: int, device):
    """A flex-attention ``BlockMask`` for the rule (built on ``device``; sparse in 128x128 tiles)."""
    return create_block_mask(mask_mod, B=batch, H=None, Q_LEN=q_len, KV_LEN=kv_len, device=device)


def build_mask(mask_mod: MaskMod, batch: int, q_len: int, kv_len: int, device, *, attn_implementation: str):
    """The mask object the model's attention implementation expects.

    ``flex_attention`` -> ``BlockMask``; ``sdpa`` -> dense bool; ``eager`` -> dense additive float
    (0 where allowed, the dtype minimum elsewhere).
    """
    if attn_implementation == "flex_attention":
        return flex_block_mask(mask_mod, batch, q_len, kv_len, device)
    mask = dense_mask(mask_mod, batch, q_len, kv_len, device)
    if attn_implementation == "eager":
        return torch.zeros(mask.shape, device=device).masked_fill(~mask, torch.finfo(torch.float32).min)
    return mask
