"""The model side of the decode engine: one preallocated KV cache for a fixed set of rows, and the forwards over it.

Layout. Row ``r`` of the engine owns row ``r`` of every layer's K/V buffers ``[rows, H_kv, capacity, D]``;
a token's K/V live at the column its forward names (``cols``). Every family writes its sequence from column
0 without padding (AR and SDAR at column = position; WeDLM at column = physical order, its positions being
logical), so attention needs one number per query: key column ``j`` is visible to query ``i`` of row ``b``
iff ``j < limits[b, i]``. That rule covers the three families:

* AR, causal: ``limits = position + 1``;
* SDAR, a block over the committed cache, bidirectional inside the block: ``limits = block start + block``;
* WeDLM, causal by physical order: ``limits = committed length + slot + 1``.

A forward first writes its own K/V, then attends, so a query sees the keys of its own forward that its
limit admits. Columns past a row's limit may hold anything (an earlier scratch forward, another request):
they are never read.

The forward computes what transformers' Llama/Qwen2/Qwen3-style decoder computes, with the checkpoint's own
embedding, RoPE and head; the layers run either fused (:class:`~textwm.generation.engine.fused_layers.FusedLayers`:
one GEMM for q/k/v and one for gate/up, the elementwise work compiled into a few kernels) or through the
checkpoint's modules (:class:`~textwm.generation.engine.fused_layers.ModuleLayers`: MoE and other layers the
fused path does not reproduce). Only the cache and the attention call are ours. It is a pure function of its inputs and of the cache columns its
limits admit, and it writes only ``cols``: running it twice on the same inputs changes nothing, which is
what CUDA-graph capture (:mod:`textwm.generation.engine.graphs`) relies on.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from textwm.generation.engine.fused_layers import FusedLayers, ModuleLayers, NotFusable, check_fusable
from textwm.generation.engine.limited_attention import limited_attention, supports

log = logging.getLogger(__name__)

#: The decode forward's attention implementations (:class:`StaticModel`).
ATTENTIONS = ("auto", "limited", "sdpa", "grouped")

#: Prefill at most this many tokens (rows x prompt length) per forward, to bound activation memory.
PREFILL_TOKENS = 16384

#: SDPA backends of the (eager) prefill, in order. Not cuDNN's: torch prefers it on Hopper, and it builds an
#: execution plan for every new shape on the host, ~2 ms per layer call (H200, torch 2.11), where each join
#: of requests brings a new (rows, prompt length): 57 ms of a 0.6B model's 8-row join went to it.
PREFILL_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class UnsupportedModel(ValueError):
    """The checkpoint's architecture is not one the engine's forward reproduces (use the reference decoders)."""


def check_architecture(model: Any) -> None:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        raise UnsupportedModel(f"{type(model).__name__}: the decode engine runs Llama/Qwen2/Qwen3-style causal LMs "
                               "(model.model.layers, rotary_emb, lm_head); decode with engine=reference")
    needed = ("q_proj", "k_proj", "v_proj", "o_proj")
    for i, layer in enumerate(layers):
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in needed):
            raise UnsupportedModel(f"{type(model).__name__} layer {i}: no q/k/v/o projections in self_attn")
    types = getattr(model.config, "layer_types", None) or ()
    if any(t != "full_attention" for t in types) or getattr(model.config, "use_sliding_window", False):
        raise UnsupportedModel(f"{type(model).__name__}: sliding-window layers are not supported by the engine")


class StaticModel:
    """A loaded causal LM plus a static KV cache of ``rows`` rows of ``capacity`` columns.

    Args:
        attention: ``"limited"`` (:func:`~textwm.generation.engine.limited_attention.limited_attention`: a
            Triton kernel that reads the per-query limits, no mask), ``"sdpa"``
            (``scaled_dot_product_attention`` with grouped KV heads and the visibility mask ``[B, 1, Q, T]``),
            ``"grouped"`` (two batched matmuls on the query heads grouped by their KV head, softmax in float32,
            each KV head read once), or ``"auto"``: limited where the kernel runs (CUDA, Triton, bf16/fp16/fp32),
            else SDPA.
        fused: run the layers fused (``True``; raises :class:`~textwm.generation.engine.fused_layers.NotFusable`
            if they are not Llama/Qwen2/Qwen3 dense layers), through their modules (``False``), or fused when
            possible (``None``). Fusing rebinds the q/k/v and gate/up weights as views of concatenated
            tensors (same values, no extra memory).
    """

    def __init__(self, model: Any, *, rows: int, capacity: int, attention: str = "auto",
                 fused: bool | None = None):
        check_architecture(model)
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
        self.model, self.inner = model, model.model
        self.layers = list(self.inner.layers)
        config = model.config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.rows, self.capacity = rows, capacity
        self.attention = _resolve_attention(attention, param, self.head_dim)
        self.layer_math = _layer_math(model, fused, n_heads=self.n_heads, n_kv=self.n_kv, head_dim=self.head_dim)
        shape = (len(self.layers), rows, self.n_kv, capacity, self.head_dim)
        # Zeros, not empty: a NaN bit pattern in a column no query reads is harmless in the matmul path,
        # but masked SDPA kernels multiply by zero weights, and 0 * NaN is NaN. One tensor for all layers
        # ([L, rows, H_kv, T, D]), so that a prefix-cache copy is one indexing op for every layer at once.
        self.all_keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.all_values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        #: Each layer's K/V ``[rows, H_kv, T, D]``: views of :attr:`all_keys` / :attr:`all_values`.
        # Indexed one by one, not unbind(): unbind's views may not be written in place where autograd is on.
        self.keys = [self.all_keys[i] for i in range(len(self.layers))]
        self.values = [self.all_values[i] for i in range(len(self.layers))]

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, limits: torch.Tensor,
                visible: torch.Tensor | None, scale: float) -> torch.Tensor:
        """``q [B, H, Q, D]`` over ``k, v [B, H_kv, T, D]`` where ``limits [B, Q]`` (``visible [B, 1, Q, T]``,
        the same rule as a mask, for the SDPA and grouped paths): ``[B, H, Q, D]``."""
        if self.attention == "limited":
            return limited_attention(q, k, v, limits, scale=scale)
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale,
                                                  enable_gqa=self.n_heads != self.n_kv)
        b, h, nq, d = q.shape
        group = h // self.n_kv
        qg = q.reshape(b, self.n_kv, group * nq, d)                     # head h uses KV head h // group
        scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale  # [B, H_kv, G*Q, T]
        scores = scores.masked_fill(~visible.repeat(1, 1, group, 1), float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(v.dtype)
        return torch.matmul(probs, v).reshape(b, h, nq, d)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor, *,
                kv_len: int, logits_from: int = 0, rows: torch.Tensor | None = None,
                last: torch.Tensor | None = None) -> torch.Tensor:
        """One forward of engine rows ``0..B-1`` (a decode step), or of engine rows ``rows`` (a prefill).

        Args:
            ids, positions, cols, limits: ``[B, Q]`` token ids, RoPE positions, cache columns to write the
                tokens' K/V at, and visibility limits (module docstring).
            kv_len: attend over cache columns ``[0, kv_len)``; at least ``limits.max()``.
            logits_from: return the logits of queries ``logits_from..Q-1`` only.
            rows: ``[B]`` the engine row each batch row writes and reads (default ``0..B-1``). Rows may repeat
                when all but one of them write only columns no query of theirs reads before rewriting them
                (a prefill's padding rows).
            last: ``[B]`` return the logits of query ``last[b]`` of each row only (a prefill's last tokens);
                overrides ``logits_from``.

        Returns:
            logits ``[B, Q - logits_from, V]`` (``[B, 1, V]`` with ``last``) in the model's dtype.
        """
        b, nq = ids.shape
        h = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(h, positions)
        visible = None if self.attention == "limited" else \
            torch.arange(kv_len, device=ids.device)[None, None, None, :] < limits[:, None, :, None]
        if rows is None:
            index = cols[:, None, :, None].expand(b, self.n_kv, nq, self.head_dim)
        math = self.layer_math
        x = math.input_norm(h)
        for i, layer in enumerate(self.layers):
            q, k, v = math.qkv_of(i, x, cos, sin)                    # [B, Q, heads, D]
            scale = layer.self_attn.scaling
            if rows is None:
                keys, values = self.keys[i][:b], self.values[i][:b]
                keys.scatter_(2, index, k.transpose(1, 2))
                values.scatter_(2, index, v.transpose(1, 2))
                o = self._attend(q.transpose(1, 2), keys[:, :, :kv_len], values[:, :, :kv_len], limits, visible,
                                 scale)
            else:
                self.keys[i][rows[:, None], :, cols] = k              # [B, Q, H_kv, D] at (row, column)
                self.values[i][rows[:, None], :, cols] = v
                o = self._attend_rows(i, q.transpose(1, 2), rows, limits, visible, kv_len, scale)
            h, x = math.finish(i, h, o.transpose(1, 2).flatten(2))   # x: the next layer's (or final) norm
        if last is not None:
            return self.model.lm_head(x[torch.arange(b, device=x.device), last][:, None])
        return self.model.lm_head(x[:, logits_from:])

    def _attend_rows(self, layer: int, q: torch.Tensor, rows: torch.Tensor, limits: torch.Tensor,
                     visible: torch.Tensor | None, kv_len: int, scale: float) -> torch.Tensor:
        """``q [B, H, Q, D]`` of engine rows ``rows [B]`` over their columns ``[0, kv_len)`` of ``layer``:
        ``[B, H, Q, D]``. The limited kernel reads the rows in place; the other paths read them gathered."""
        keys, values = self.keys[layer][:, :, :kv_len], self.values[layer][:, :, :kv_len]
        if self.attention == "limited":
            return limited_attention(q, keys, values, limits, scale=scale, rows=rows)
        return self._attend(q, keys[rows], values[rows], limits, visible, scale)

    def prefill(self, slots: torch.Tensor, prompts: list[list[int]], *, block: int | None = None,
                pad_id: int = 0) -> torch.Tensor:
        """Write the K/V of whole ``prompts`` at columns ``0..len-1`` of engine rows ``slots [n]``, eagerly.

        Causal attention, or block-causal (bidirectional inside blocks of ``block``: SDAR) when ``block``
        is given; prompts are right-padded, which no real query sees under either mask. Returns the
        logits ``[n, V]`` of each prompt's last token (the first token of an AR continuation). The engine's
        prefills, with the prefix cache and CUDA graphs, are :class:`~textwm.generation.engine.prefill.Prefiller`'s.
        """
        per_chunk = max(1, PREFILL_TOKENS // max(map(len, prompts)))
        return torch.cat([self._prefill_chunk(slots[s:s + per_chunk], prompts[s:s + per_chunk], block, pad_id)
                          for s in range(0, len(prompts), per_chunk)])

    def _prefill_chunk(self, slots: torch.Tensor, prompts: list[list[int]], block: int | None,
                       pad_id: int) -> torch.Tensor:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(self.device)
        col = torch.arange(width, device=self.device)
        h = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(h, col[None, :].expand(len(prompts), -1))
        mask = None if block is None else (col[:, None] // block >= col[None, :] // block)
        math = self.layer_math
        x = math.input_norm(h)
        for i, layer in enumerate(self.layers):
            q, k, v = (t.transpose(1, 2) for t in math.qkv_of(i, x, cos, sin))   # [n, heads, width, D]
            self.keys[i][slots, :, :width] = k
            self.values[i][slots, :, :width] = v
            if self.n_heads != self.n_kv:   # KV heads repeated: flash and memory-efficient SDPA, unlike GQA
                k, v = (t.repeat_interleave(self.n_heads // self.n_kv, dim=1) for t in (k, v))
            with sdpa_kernel(PREFILL_SDPA_BACKENDS, set_priority=True):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                   scale=layer.self_attn.scaling)
            h, x = math.finish(i, h, o.transpose(1, 2).flatten(2))
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        return self.model.lm_head(x[torch.arange(len(prompts), device=self.device), last])


def _layer_math(model: Any, fused: bool | None, **shape: int) -> FusedLayers | ModuleLayers:
    """The fused layers when asked (``True``: raise if the layers are not fusable) or when possible (``None``),
    else the modules'."""
    if fused is False:
        return ModuleLayers(model, **shape)
    try:
        check_fusable(model)
    except NotFusable as e:
        if fused:
            raise
        log.info("decode engine: unfused layers (%s)", e)
        return ModuleLayers(model, **shape)
    return FusedLayers(model, **shape)


def _resolve_attention(attention: str, param: torch.Tensor, head_dim: int) -> str:
    """``attention`` with ``"auto"`` decided; ``"limited"`` where the kernel cannot run is an error."""
    unsupported = supports(param, head_dim)
    if attention == "limited" and unsupported:
        raise ValueError(f"attention=limited cannot run here: {unsupported}; use auto, sdpa or grouped")
    if attention == "auto":
        return "sdpa" if unsupported else "limited"
    return attention
