"""Llama/Qwen2/Qwen3-style decoder layers as a few fused kernels, for the engine's forward.

Through the checkpoint's own modules one layer is about 60 kernels: RMSNorm alone is six elementwise ops,
the q/k norms twelve more, RoPE a dozen, and q, k, v, gate and up are five GEMMs. At batch 1 a decode forward
of an 8B model is then mostly launch time even inside a CUDA graph (~10 ms against a 3.9 ms weight read).
:class:`FusedLayers` computes the same layer as

* one GEMM for q, k and v and one for gate and up: the modules' weights are concatenated once and the
  modules' own parameters rebound as views of the concatenation, so memory does not grow and the
  reference path (which calls the modules) keeps working on the same weights;
* two pure functions around the attention call, :func:`attention_inputs` (q/k/v split, q/k RMSNorm, RoPE)
  and :func:`layer_output` (o_proj, residual, RMSNorm, SiLU-gated MLP, residual, and the *next* layer's
  input RMSNorm), which ``torch.compile`` (inductor) turns into a handful of fused kernels on CUDA. They take
  the weights as arguments, so one compiled graph serves every layer; the token dimension is dynamic, so one
  graph serves every batch and query length (decode and prefill).

The arithmetic is the modules' (transformers ``Qwen3RMSNorm``: float32 variance, cast back before the
weight; ``apply_rotary_pos_emb``; ``Qwen3MLP``), and inductor is asked to keep eager's intermediate
roundings (``emulate_precision_casts``), so outputs match the module path to rounding. Layers it does not
reproduce (another norm or activation, MLP biases, mixture of experts) make :func:`check_fusable` raise
:class:`NotFusable`; the engine then runs the modules.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx.experimental._config as fx_config
import torch.nn.functional as F
from torch import nn
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb


class NotFusable(ValueError):
    """The layers are not the Llama/Qwen2/Qwen3 dense layer :class:`FusedLayers` computes."""


def _is_rms_norm(module: Any) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon")


def check_fusable(model: Any) -> None:
    """Raise :class:`NotFusable` naming the first layer part the fused path does not reproduce."""
    if getattr(model.config, "hidden_act", None) != "silu":
        raise NotFusable(f"hidden_act {getattr(model.config, 'hidden_act', None)!r}: the fused MLP is SiLU-gated")
    if not _is_rms_norm(model.model.norm):
        raise NotFusable(f"final norm {type(model.model.norm).__name__} is not an RMSNorm")
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        for name in ("input_layernorm", "post_attention_layernorm"):
            if not _is_rms_norm(getattr(layer, name, None)):
                raise NotFusable(f"layer {i}: {name} is not an RMSNorm")
        for name in ("q_norm", "k_norm"):
            norm = getattr(attn, name, None)
            if norm is not None and not isinstance(norm, nn.Identity) and not _is_rms_norm(norm):
                raise NotFusable(f"layer {i}: self_attn.{name} is {type(norm).__name__}")
        if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
            raise NotFusable(f"layer {i}: the MLP is not gate/up/down ({type(mlp).__name__}; experts?)")
        if any(getattr(mlp, n).bias is not None for n in ("gate_proj", "up_proj", "down_proj")):
            raise NotFusable(f"layer {i}: MLP projections with a bias")
        if (attn.q_proj.bias is None) != (attn.k_proj.bias is None) or \
                (attn.q_proj.bias is None) != (attn.v_proj.bias is None):
            raise NotFusable(f"layer {i}: q, k and v disagree on having a bias")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm of ``x [..., hidden]``: float32 statistics, cast back, then the weight."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE of ``x [N, heads, D]`` at ``cos, sin [N, 1, D]`` (transformers' rotate-half form)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attention_inputs(x: torch.Tensor, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor | None,
                     q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, cos: torch.Tensor,
                     sin: torch.Tensor, eps: float, n_heads: int, n_kv: int, head_dim: int):
    """q, k, v of the normalised hidden states ``x [N, hidden]`` at RoPE ``cos, sin [N, D]``.

    Returns ``q [N, H, D]`` and ``k, v [N, H_kv, D]``, q and k after their per-head RMSNorm (when the layer
    has one; ``q_norm``/``k_norm`` are its weights or None) and RoPE.
    """
    qkv = F.linear(x, qkv_weight, qkv_bias)
    q, k, v = qkv.split((n_heads * head_dim, n_kv * head_dim, n_kv * head_dim), dim=-1)
    q, k = q.unflatten(-1, (n_heads, head_dim)), k.unflatten(-1, (n_kv, head_dim))
    if q_norm is not None:
        q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return _rope(q, cos, sin), _rope(k, cos, sin), v.unflatten(-1, (n_kv, head_dim))


def layer_output(h: torch.Tensor, o: torch.Tensor, o_weight: torch.Tensor, o_bias: torch.Tensor | None,
                 post_norm: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor,
                 next_norm: torch.Tensor, eps: float, next_eps: float):
    """The rest of a layer: ``h [N, hidden]`` plus o_proj of the attention output ``o [N, H * D]``, then the
    MLP block. Returns the new hidden states ``[N, hidden]`` and their RMSNorm under ``next_norm`` (the next
    layer's input norm, or the model's final norm after the last layer), ``[N, hidden]``."""
    h = h + F.linear(o, o_weight, o_bias)
    gate, up = F.linear(rms_norm(h, post_norm, eps), gate_up_weight).chunk(2, dim=-1)
    h = h + F.linear(F.silu(gate) * up, down_weight)
    return h, rms_norm(h, next_norm, next_eps)


def _fuse_rows(owner: nn.Module, name: str, modules: list[nn.Linear], attr: str) -> torch.Tensor | None:
    """Concatenate the modules' ``attr`` tensors along dim 0 and rebind each as a view of the result.

    The result is kept on ``owner`` under ``name``: a second engine over the same model (a bigger cache)
    finds the weights already fused and reuses them instead of copying them again, as long as the modules
    still hold the views (``load_state_dict`` copies into them in place; a replaced parameter is re-fused).
    """
    parts = [getattr(m, attr) for m in modules]
    if parts[0] is None:
        return None
    fused = getattr(owner, name, None)
    start = 0
    views = []
    for part in parts:
        views.append((start, start + part.shape[0]))
        start += part.shape[0]
    if fused is not None and all(p.data_ptr() == fused[a:b].data_ptr() and p.shape == fused[a:b].shape
                                 for p, (a, b) in zip(parts, views)):
        return fused
    fused = torch.cat([p.data for p in parts])
    for part, (a, b) in zip(parts, views):
        part.data = fused[a:b]
    setattr(owner, name, fused)
    return fused


class FusedLayers:
    """The fused form of ``model``'s decoder layers (module docstring).

    Args:
        compiled: compile the two layer functions with inductor (default: on CUDA). Uncompiled they are
            still fewer ops than the modules' (one GEMM for q/k/v, one for gate/up).
    """

    def __init__(self, model: Any, *, n_heads: int, n_kv: int, head_dim: int, compiled: bool | None = None):
        check_fusable(model)
        layers = list(model.model.layers)
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv, head_dim
        self.qkv, self.gate_up = [], []
        for layer in layers:
            attn, mlp = layer.self_attn, layer.mlp
            projections = [attn.q_proj, attn.k_proj, attn.v_proj]
            self.qkv.append((_fuse_rows(attn, "_fused_qkv_weight", projections, "weight"),
                             _fuse_rows(attn, "_fused_qkv_bias", projections, "bias")))
            self.gate_up.append(_fuse_rows(mlp, "_fused_gate_up_weight", [mlp.gate_proj, mlp.up_proj], "weight"))
        self.layers = layers
        self.final_norm = model.model.norm
        device = next(model.parameters()).device
        if compiled is None:
            compiled = device.type == "cuda"
        options = {"emulate_precision_casts": True}
        if compiled:
            # One compiled graph per dtype, per bias/q-norm presence and for a token count of 1 (dynamo
            # specialises sizes 0/1): a process that runs several models (the test suite, a benchmark)
            # passes dynamo's default of 8 graphs per function, past which fullgraph compilation raises.
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            # Sizes that happen to be equal (a prefill's token count and the hidden size, ...) would otherwise
            # be assumed equal in the graph and recompile it when they differ: seconds in a running server.
            fx_config.use_duck_shape = False
        compile_ = (lambda f: torch.compile(f, dynamic=True, fullgraph=True, options=options)) if compiled \
            else (lambda f: f)
        self._attention_inputs, self._layer_output = compile_(attention_inputs), compile_(layer_output)
        self._rms_norm = compile_(rms_norm)

    def input_norm(self, h: torch.Tensor) -> torch.Tensor:
        """Layer 0's input RMSNorm of ``h [B, Q, hidden]`` (the later ones come out of :meth:`finish`)."""
        norm = self.layers[0].input_layernorm
        return self._rms_norm(h.flatten(0, 1), norm.weight, norm.variance_epsilon).view(h.shape)

    def qkv_of(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Layer ``i``'s ``q [B, Q, H, D]``, ``k, v [B, Q, H_kv, D]`` of its normalised input ``x [B, Q, hidden]``
        at RoPE ``cos, sin [B, Q, D]`` (:func:`attention_inputs` over the flattened tokens)."""
        attn = self.layers[i].self_attn
        q_norm = getattr(attn, "q_norm", None)
        norms = (None, None) if q_norm is None or isinstance(q_norm, nn.Identity) else \
            (q_norm.weight, attn.k_norm.weight)
        eps = getattr(q_norm, "variance_epsilon", 0.0)
        weight, bias = self.qkv[i]
        q, k, v = self._attention_inputs(x.flatten(0, 1), weight, bias, *norms, cos.flatten(0, 1),
                                         sin.flatten(0, 1), eps, self.n_heads, self.n_kv, self.head_dim)
        return (t.unflatten(0, x.shape[:2]) for t in (q, k, v))

    def finish(self, i: int, h: torch.Tensor, o: torch.Tensor):
        """Layer ``i`` after attention (:func:`layer_output`): ``h [B, Q, hidden]``, ``o [B, Q, H * D]`` ->
        the new ``h`` and the next layer's normalised input (the final norm's after the last layer)."""
        layer = self.layers[i]
        post = layer.post_attention_layernorm
        nxt = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.final_norm
        o_proj = layer.self_attn.o_proj
        h, x = self._layer_output(h.flatten(0, 1), o.flatten(0, 1), o_proj.weight, o_proj.bias, post.weight,
                                  self.gate_up[i], layer.mlp.down_proj.weight, nxt.weight,
                                  post.variance_epsilon, nxt.variance_epsilon)
        return h.view(o.shape[0], o.shape[1], -1), x.view(o.shape[0], o.shape[1], -1)


class ModuleLayers:
    """The interface of :class:`FusedLayers` through the checkpoint's own modules (any Llama/Qwen2/Qwen3-style
    layer, experts included; tensors ``[B, Q, ...]`` as there): the engine's path when the layers are not
    fusable, and what the fused path is tested against."""

    def __init__(self, model: Any, *, n_heads: int, n_kv: int, head_dim: int):
        self.layers = list(model.model.layers)
        self.final_norm = model.model.norm
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv, head_dim

    def input_norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.layers[0].input_layernorm(h)

    def qkv_of(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        attn = self.layers[i].self_attn
        q = attn.q_proj(x).unflatten(-1, (self.n_heads, self.head_dim))
        k = attn.k_proj(x).unflatten(-1, (self.n_kv, self.head_dim))
        if hasattr(attn, "q_norm"):   # Qwen3 (WeDLM without qk_norm holds identities); Llama, Qwen2: none
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
        return q, k, attn.v_proj(x).unflatten(-1, (self.n_kv, self.head_dim))

    def finish(self, i: int, h: torch.Tensor, o: torch.Tensor):
        layer = self.layers[i]
        h = h + layer.self_attn.o_proj(o)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        nxt = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.final_norm
        return h, nxt(h)
