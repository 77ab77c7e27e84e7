"""Cross-entropy of the output projection without materialising the logits (``loss_impl: chunked``).

The objectives need, per loss position ``n``, ``CE(h[n] @ W.T, t[n])`` with ``h`` the final hidden
state and ``W [V, H]`` the lm_head weight. Taken the plain way, the float32 logits ``[N, V]`` are
kept for the backward pass: at a 150k vocabulary that is most of a training step's memory.
:func:`linear_cross_entropy` instead walks ``N`` in chunks, keeps only the per-token logsumexp, and
recomputes each chunk's logits in the backward pass (one extra ``[N, H] x [H, V]`` matmul), so at
most one chunk of logits (and its softmax) is alive at a time.

Precision follows the plain path: the matmuls run in the dtype the lm_head's would (autocast's under the
trainer's bf16; the weights' own under DeepSpeed's bf16, which does not autocast; float32 or float64 for such
inputs), and the logits are taken to float32 (float64 for float64 inputs) for the logsumexp and softmax. A float32 matmul at a
150k vocabulary would run at a tenth of the GPU's bf16 rate: the first version did, and made the AR step
1.3x slower on an H200.

:func:`model_token_cross_entropy` applies it to an HF causal LM: it runs the model's own forward
(so DDP, DeepSpeed, FSDP and accelerate's autocast see an ordinary call) with the lm_head module
computing the per-token CE in place of its logits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

#: Bytes of float32 logits one chunk may hold (the backward pass holds about twice that).
CHUNK_BYTES = 256 * 2**20
IGNORE_INDEX = -100


def default_chunk_size(vocab_size: int) -> int:
    """Rows per chunk so that a chunk's float32 logits ``[rows, vocab_size]`` stay within :data:`CHUNK_BYTES`."""
    return max(1, CHUNK_BYTES // (4 * max(vocab_size, 1)))


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    # Under autocast, the matmuls below would run in bf16 whatever we cast to: the logit math is float32 on purpose.
    try:
        return torch.autocast(device_type=device.type, enabled=False)
    except RuntimeError:  # a device type without autocast
        return contextlib.nullcontext()


def _math_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for bf16 / fp16 / fp32 inputs, float64 for float64 ones (exact checks against a float64 reference)."""
    return torch.promote_types(dtype, torch.float32)


def _chunk_logits(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, math: torch.dtype) -> torch.Tensor:
    """``[c, H] -> [c, V]`` logits of one chunk: the matmul in the dtype of ``w``, the result in ``math``."""
    h = h.to(w.dtype)
    return (torch.addmm(b, h, w.t()) if b is not None else h @ w.t()).to(math)


def _matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the lm_head's own matmul would run in: autocast's (bf16 / fp16 under the trainer's mixed
    precision; autocast leaves float64 alone), else the inputs' (bf16 weights under DeepSpeed bf16, float32, float64)."""
    inputs = torch.promote_types(hidden.dtype, weight.dtype)
    try:
        if inputs != torch.float64 and torch.is_autocast_enabled(hidden.device.type):
            return torch.get_autocast_dtype(hidden.device.type)
    except RuntimeError:  # a device type without autocast
        pass
    return inputs


class _LinearCrossEntropy(torch.autograd.Function):
    """``loss[n] = logsumexp(h[n] @ W.T + b) - (h[n] @ W[t[n]] + b[t[n]])``, chunked over ``n``.

    Saved for backward: the inputs (no copies) and ``lse [N]`` float32, nothing of size ``V`` per token.
    """

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, chunk_size: int, matmul_dtype: torch.dtype) -> torch.Tensor:
        n, math = hidden.shape[0], _math_dtype(torch.promote_types(hidden.dtype, weight.dtype))
        mm = matmul_dtype
        lse = torch.empty(n, dtype=math, device=hidden.device)
        loss = torch.zeros(n, dtype=math, device=hidden.device)
        valid = targets != IGNORE_INDEX
        with _no_autocast(hidden.device):
            # The weight is cast once per call (as autocast's cast cache does for the lm_head).
            w = weight.to(mm)
            b = bias.to(mm) if bias is not None else None
            for start in range(0, n, chunk_size):
                rows = slice(start, start + chunk_size)
                logits = _chunk_logits(hidden[rows], w, b, math)
                lse[rows] = torch.logsumexp(logits, dim=-1)
                safe = targets[rows].clamp(min=0)[:, None]          # ignored rows gather column 0, masked below
                picked = logits.gather(1, safe)[:, 0]
                loss[rows] = torch.where(valid[rows], lse[rows] - picked, 0.0)
                del logits
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk_size = chunk_size
        ctx.matmul_dtype = mm
        ctx.has_bias = bias is not None
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        n = hidden.shape[0]
        grad_h = torch.empty_like(hidden) if need_h else None
        # float32 accumulators over the chunks, cast to the parameters' dtype at the end.
        math = lse.dtype
        grad_w32 = torch.zeros(weight.shape, dtype=math, device=weight.device) if need_w else None
        grad_b32 = torch.zeros(weight.shape[0], dtype=math, device=weight.device) if need_b else None
        valid = targets != IGNORE_INDEX
        # d loss[n] / d logits[n] = softmax(logits[n]) - onehot(t[n]); times the incoming grad_loss[n].
        scale = torch.where(valid, grad_loss.to(math), 0.0)
        mm = ctx.matmul_dtype
        with _no_autocast(hidden.device):
            w = weight.to(mm)
            b = bias.to(mm) if ctx.has_bias else None
            for start in range(0, n, ctx.chunk_size):
                rows = slice(start, start + ctx.chunk_size)
                h = hidden[rows].to(mm)
                grad_logits = _chunk_logits(h, w, b, math)
                grad_logits.sub_(lse[rows, None]).exp_()                  # softmax, in place
                grad_logits.scatter_add_(1, targets[rows].clamp(min=0)[:, None],
                                         -valid[rows, None].to(math))     # - onehot (not for ignored rows)
                grad_logits.mul_(scale[rows, None])
                grad_mm = grad_logits.to(mm)                                  # the matmuls' dtype, as forward
                if need_h:
                    grad_h[rows] = (grad_mm @ w).to(hidden.dtype)
                if need_w:                                                    # summed over chunks in float32
                    if mm == math:
                        grad_w32.addmm_(grad_mm.t(), h)
                    else:                                                     # a bf16 [V, H] per chunk
                        grad_w32 += grad_mm.t() @ h
                if need_b:
                    grad_b32 += grad_logits.sum(dim=0)
                del grad_logits
        return (grad_h, grad_w32.to(weight.dtype) if need_w else None,
                grad_b32.to(bias.dtype) if need_b else None, None, None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                         bias: torch.Tensor | None = None, chunk_size: int | None = None) -> torch.Tensor:
    """Per-token cross-entropy of ``hidden @ weight.T (+ bias)`` without the ``[N, V]`` logits.

    Equals ``F.cross_entropy((hidden @ weight.T + bias).float(), targets, reduction="none")``,
    targets of :data:`IGNORE_INDEX` (-100) giving 0, with the logits taken in float32 (float64 for
    float64 inputs), accumulated gradients too; under autocast the matmuls run in its dtype, as the
    lm_head's would. Gradients
    flow to ``hidden``, ``weight`` and ``bias``, for any incoming gradient ``[N]`` (so a caller may
    weight tokens, e.g. SDAR's ``1/p``).

    Args:
        hidden: ``[N, H]``, any float dtype (the final hidden states at the loss positions).
        weight: ``[V, H]`` (the lm_head weight, tied to the embedding or not).
        targets: ``[N]`` long, in ``[0, V)`` or -100.
        bias: optional ``[V]`` lm_head bias.
        chunk_size: rows per chunk; default :func:`default_chunk_size` (about 256 MB of float32 logits).

    Returns:
        ``[N]`` float32 (float64 for float64 inputs).
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: hidden must be [N, H] and weight [V, H], got "
                         f"{tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"linear_cross_entropy: targets must be [N] = [{hidden.shape[0]}], got {tuple(targets.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"linear_cross_entropy: bias must be [V] = [{weight.shape[0]}], got {tuple(bias.shape)}")
    if chunk_size is None:
        chunk_size = default_chunk_size(weight.shape[0])
    if chunk_size < 1:
        raise ValueError(f"linear_cross_entropy: chunk_size must be >= 1, got {chunk_size}")
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets.long(), int(chunk_size),
                                     _matmul_dtype(hidden, weight))


# --- on an HF causal LM ----------------------------------------------------------------------------

#: Config fields of HF models that change the logits after the lm_head (softcapping, scaling): the
#: per-token CE of the plain projection would not be the model's loss.
LOGIT_TRANSFORM_FIELDS = ("final_logit_softcapping", "logit_softcapping", "logit_scale", "logits_scaling")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The HF model inside DDP / DeepSpeed / FSDP wrappers (each keeps it as ``.module``)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return model


def output_projection(model: nn.Module) -> nn.Linear:
    """The lm_head of an HF causal LM (``get_output_embeddings()``; its weight may be the tied embedding).

    Raises:
        ValueError: the model transforms its logits after the lm_head (softcapping, a logit scale),
            or its output embedding is not a ``nn.Linear``; the message names the model class.
    """
    inner = unwrap_model(model)
    name = type(inner).__name__
    config = getattr(inner, "config", None)
    for field in LOGIT_TRANSFORM_FIELDS:
        value = getattr(config, field, None)
        if value not in (None, 0, 1, 1.0):
            raise ValueError(f"loss_impl chunked: {name} has {field}={value!r}, a transform of the logits after "
                             f"the lm_head that the chunked cross-entropy does not apply; use loss_impl: logits")
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise ValueError(f"loss_impl chunked: {name} has no nn.Linear output projection (get_output_embeddings() "
                         f"is {type(head).__name__}); use loss_impl: logits")
    return head


@contextlib.contextmanager
def _forward_replaced(module: nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    """``module.forward`` is ``forward`` inside the block. Its hooks still run (ZeRO-3 gathers the weight)."""
    own = module.__dict__.get("forward")            # accelerate may have set one already
    module.forward = forward
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


def model_token_cross_entropy(model: nn.Module, *, keep: torch.Tensor, select: torch.Tensor,
                              targets: torch.Tensor, chunk_size: int | None = None,
                              **model_inputs: torch.Tensor) -> torch.Tensor:
    """Per-token CE of an HF causal LM at chosen positions, without its logits.

    Runs ``model(**model_inputs, logits_to_keep=keep)`` (the model or its DDP/DeepSpeed/FSDP wrapper:
    its forward hooks, gradient sync and autocast apply as usual) while the lm_head computes
    :func:`linear_cross_entropy` of its input, the final hidden states at ``keep`` (Qwen3 and the
    repo's SDAR / SDAR-MoE / WeDLM classes slice them with ``logits_to_keep``), so the weight is
    used inside the lm_head call where a sharding wrapper has gathered it. Equals
    ``F.cross_entropy(model(..., logits_to_keep=keep).logits[select].float(), targets, reduction="none")``.

    Args:
        keep: ``[K]`` long, sequence positions whose hidden states are projected.
        select: ``[B, K]`` bool, the kept positions that get a loss (``N`` of them).
        targets: ``[N]`` long, in the row-major order of ``select`` (as ``logits[select]``).
        chunk_size: see :func:`linear_cross_entropy`.
        model_inputs: the forward's inputs (``input_ids``, ``position_ids``, ``attention_mask``, ...).

    Returns:
        ``[N]`` float32.

    Raises:
        ValueError: the model transforms its logits after the lm_head (:func:`output_projection`),
            or its output is not what its lm_head returned.
    """
    head = output_projection(model)
    computed: list[torch.Tensor] = []

    def head_forward(hidden: torch.Tensor) -> torch.Tensor:      # [B, K, H] -> [N]
        ce = linear_cross_entropy(hidden[select], head.weight, targets, bias=head.bias, chunk_size=chunk_size)
        computed.append(ce)
        return ce

    with _forward_replaced(head, head_forward):
        ce = model(**model_inputs, logits_to_keep=keep).logits
    # DDP may hand back a copy of what the lm_head returned; anything else (softcapping or scaling of
    # the logits that no config field announced, a second lm_head call) means the CE is not the model's.
    if len(computed) != 1 or not (ce is computed[0] or (ce.shape == computed[0].shape
                                                        and torch.equal(ce.detach(), computed[0].detach()))):
        raise ValueError(f"loss_impl chunked: {type(unwrap_model(model)).__name__} changes the output of its "
                         f"lm_head (or calls it {len(computed)} times); use loss_impl: logits")
    return ce
