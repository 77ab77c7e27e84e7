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

The forward reuses the checkpoint's own modules (embedding, norms, projections, q/k norms, MLP or MoE,
RoPE, head) layer by layer, so it computes what transformers' Qwen2/Qwen3-style decoder computes; only the
cache and the attention call are ours. It is a pure function of its inputs and of the cache columns its
limits admit, and it writes only ``cols``: running it twice on the same inputs changes nothing, which is
what CUDA-graph capture (:mod:`textwm.generation.engine.graphs`) relies on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

#: Prefill at most this many tokens (rows x prompt length) per forward, to bound activation memory.
PREFILL_TOKENS = 16384


class UnsupportedModel(ValueError):
    """The checkpoint's architecture is not one the engine's forward reproduces (use the reference decoders)."""


def check_architecture(model: Any) -> None:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        raise UnsupportedModel(f"{type(model).__name__}: the decode engine runs Qwen2/Qwen3-style causal LMs "
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
        attention: ``"sdpa"`` (``scaled_dot_product_attention`` with grouped KV heads and the visibility
            mask) or ``"grouped"`` (two batched matmuls on the query heads grouped by their KV head,
            softmax in float32); both read each KV head once, never a repeated copy.
    """

    def __init__(self, model: Any, *, rows: int, capacity: int, attention: str = "sdpa"):
        check_architecture(model)
        if attention not in ("sdpa", "grouped"):
            raise ValueError(f"attention must be sdpa or grouped, got {attention!r}")
        self.model, self.inner = model, model.model
        self.layers = list(self.inner.layers)
        config = model.config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.rows, self.capacity, self.attention = rows, capacity, attention
        shape = (rows, self.n_kv, capacity, self.head_dim)
        # Zeros, not empty: a NaN bit pattern in a column no query reads is harmless in the matmul path,
        # but masked SDPA kernels multiply by zero weights, and 0 * NaN is NaN.
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def _qkv(self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """``q [B, H, Q, D]``, ``k, v [B, H_kv, Q, D]`` of ``x [B, Q, hidden]`` (as the HF attention layer)."""
        attn = layer.self_attn
        shape = (*x.shape[:2], -1, self.head_dim)
        q, k = attn.q_proj(x).view(shape), attn.k_proj(x).view(shape)
        if hasattr(attn, "q_norm"):   # Qwen3 (WeDLM without qk_norm holds identities)
            q, k = attn.q_norm(q), attn.k_norm(k)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q, k, v

    def _finish_layer(self, layer: Any, h: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Residual + o_proj of the attention output ``o [B, H, Q, D]``, then the MLP block."""
        h = h + layer.self_attn.o_proj(o.transpose(1, 2).reshape(*h.shape[:2], -1))
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor,
                scale: float) -> torch.Tensor:
        """``q [B, H, Q, D]`` over ``k, v [B, H_kv, T, D]`` where ``visible [B, 1, Q, T]``: ``[B, H, Q, D]``."""
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
                kv_len: int, logits_from: int = 0) -> torch.Tensor:
        """One decode forward of engine rows ``0..B-1``.

        Args:
            ids, positions, cols, limits: ``[B, Q]`` token ids, RoPE positions, cache columns to write the
                tokens' K/V at, and visibility limits (module docstring).
            kv_len: attend over cache columns ``[0, kv_len)``; at least ``limits.max()``.
            logits_from: return the logits of queries ``logits_from..Q-1`` only.

        Returns:
            logits ``[B, Q - logits_from, V]`` in the model's dtype.
        """
        b, nq = ids.shape
        h = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(h, positions)
        visible = torch.arange(kv_len, device=ids.device)[None, None, None, :] < limits[:, None, :, None]
        index = cols[:, None, :, None].expand(b, self.n_kv, nq, self.head_dim)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, layer.input_layernorm(h), cos, sin)
            keys, values = self.keys[i][:b], self.values[i][:b]
            keys.scatter_(2, index, k)
            values.scatter_(2, index, v)
            o = self._attend(q, keys[:, :, :kv_len], values[:, :, :kv_len], visible, layer.self_attn.scaling)
            h = self._finish_layer(layer, h, o)
        return self.model.lm_head(self.inner.norm(h[:, logits_from:]))

    def prefill(self, slots: torch.Tensor, prompts: list[list[int]], *, block: int | None = None,
                pad_id: int = 0) -> torch.Tensor:
        """Write the K/V of ``prompts`` at columns ``0..len-1`` of engine rows ``slots [n]``.

        Causal attention, or block-causal (bidirectional inside blocks of ``block``: SDAR) when ``block``
        is given; prompts are right-padded, which no real query sees under either mask. Returns the
        logits ``[n, V]`` of each prompt's last token (the first token of an AR continuation).
        """
        lengths = [len(p) for p in prompts]
        per_chunk = max(1, PREFILL_TOKENS // max(lengths))
        last = []
        for start in range(0, len(prompts), per_chunk):
            chunk = slice(start, start + per_chunk)
            last.append(self._prefill_chunk(slots[chunk], prompts[chunk], block, pad_id))
        return torch.cat(last)

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
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, layer.input_layernorm(h), cos, sin)
            self.keys[i][slots, :, :width] = k
            self.values[i][slots, :, :width] = v
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                               scale=layer.self_attn.scaling, enable_gqa=self.n_heads != self.n_kv)
            h = self._finish_layer(layer, h, o)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        return self.model.lm_head(self.inner.norm(h[torch.arange(len(prompts), device=self.device), last]))
