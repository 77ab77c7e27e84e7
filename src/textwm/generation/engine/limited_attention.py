"""Attention over a static KV cache where each query sees a prefix of its row: one Triton kernel, no mask.

The engine's visibility rule (:mod:`textwm.generation.engine.static_model`) is one number per query: key
column ``j`` of row ``b`` is visible to query ``i`` iff ``j < limits[b, i]``. SDPA can only take that as a
materialised boolean mask ``[B, 1, Q, T]``, which rules out its flash kernel and, with grouped KV heads,
sends it to the math path that repeats every KV head for its query heads (at batch 128 and 1,152 columns of
Qwen3-8B that is ~2.6 GB of copies per layer). :func:`limited_attention` reads the limits instead:

* one program per (row, KV head, tile of ``BLOCK_M`` query rows), where the query rows of a KV head are its
  ``G = H / H_kv`` query heads times the ``Q`` queries, so each KV head is read once for all its heads;
* the program walks key tiles up to the largest limit among its query rows only (a row's unwritten tail
  is never read), masks each query at its own limit, and keeps an online softmax in float32
  (flash-attention's recurrence), so nothing of size ``T`` is materialised.

Loads past a row's largest limit are masked to zero, so stale columns (of an earlier request, or NaN
garbage from a free row) cannot leak in; a query with no visible key gets zeros.

Triton is what PyTorch's CUDA wheels ship for inductor; without it (or off CUDA) the engine uses SDPA.
Float64 has no tensor-core ``dot`` here: the engine keeps SDPA for it (:func:`supports`).
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:   # CPU-only installs: the engine keeps SDPA
    triton = None

#: Dtypes the kernel runs (float32 with IEEE products, not TF32, to match SDPA's float32).
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def supports(q: torch.Tensor, head_dim: int) -> str | None:
    """Why the kernel cannot run ``q`` (``None`` when it can): no Triton, not CUDA, dtype, head size."""
    if triton is None:
        return "triton is not installed"
    if q.device.type != "cuda" and not _interpreting():
        return f"tensors on {q.device.type}, not CUDA"
    if q.dtype not in DTYPES:
        return f"dtype {q.dtype} (the kernel runs {', '.join(str(d) for d in DTYPES)})"
    if head_dim < 16 or head_dim & (head_dim - 1):
        return f"head_dim {head_dim} (the kernel needs a power of two >= 16)"
    return None


def _interpreting() -> bool:
    """Triton's CPU interpreter (``TRITON_INTERPRET=1``, for developing the kernel without a GPU) is on."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def limited_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, limits: torch.Tensor, *,
                      scale: float, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of ``q [B, H, Q, D]`` over ``k, v [B, H_kv, T, D]`` (any strides; ``T`` at least the
    largest limit) where query ``i`` of row ``b`` sees key columns ``j < limits[b, i]`` (``limits [B, Q]``).
    With ``rows [B]``, ``k, v`` are ``[R, H_kv, T, D]`` and query row ``b`` reads their row ``rows[b]`` (a
    prefill's engine rows, read in place rather than gathered).
    Returns ``[B, H, Q, D]`` in ``q``'s dtype, a view of a ``[B, Q, H, D]`` buffer (so the o_proj input
    ``out.transpose(1, 2).flatten(2)`` needs no copy)."""
    b, h, nq, d = q.shape
    n_kv = k.shape[1]
    group = h // n_kv
    rows_per_head = group * nq
    block_m = min(64, max(16, triton.next_power_of_2(rows_per_head)))
    out = torch.empty((b, nq, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    limits = limits.to(torch.int32).contiguous()
    if rows is not None:
        rows = rows.to(torch.int32).contiguous()
    grid = (b, n_kv, triton.cdiv(rows_per_head, block_m))
    _limited_attention_kernel[grid](
        q, k, v, out, limits, limits if rows is None else rows, scale,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), limits.stride(0),
        k.shape[2], nq, rows_per_head, group,
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=64, HAS_ROWS=rows is not None,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    return out


#: Integer arguments that follow the prompt's width. Triton compiles one variant of a kernel per divisibility
#: of its integer arguments by 16 (and per value 1); left to it, a join of a width not seen before (an eager
#: prefill wider than the bucketed ones) would compile a new variant while requests wait.
UNSPECIALISED = ("slb", "cols", "nq", "rows_per_head")


def compiled_variants() -> int | None:
    """Variants of the kernel compiled in this process so far (None where this Triton keeps them elsewhere)."""
    if triton is None:
        return 0
    try:
        return sum(len(cache[0]) for cache in _limited_attention_kernel.device_caches.values())
    except (AttributeError, TypeError, IndexError):
        return None


if triton is not None:
    @triton.jit(do_not_specialize=UNSPECIALISED)
    def _limited_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lim_ptr, rows_ptr, scale,
                                  sqb, sqh, sqq, sqd, skb, skh, skt, skd, svb, svh, svt, svd,
                                  sob, soh, soq, sod, slb,
                                  cols, nq, rows_per_head, group,
                                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                  HAS_ROWS: tl.constexpr, PRECISION: tl.constexpr):
        row, kv_head, tile = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        m = tile * BLOCK_M + tl.arange(0, BLOCK_M)          # query rows of this KV head: (head in group, query)
        m_ok = m < rows_per_head
        head = kv_head * group + m // nq
        query = m % nq
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + row * sqb + head[:, None] * sqh + query[:, None] * sqq + d[None, :] * sqd,
                    mask=m_ok[:, None], other=0.0)
        limit = tl.load(lim_ptr + row * slb + query, mask=m_ok, other=0)
        top = tl.max(tl.minimum(limit, cols), axis=0)       # no key at or past this is read
        best = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
        if HAS_ROWS:   # the cache row this query row reads (a prefill's engine rows)
            kv_row = tl.load(rows_ptr + row).to(tl.int64)
        else:
            kv_row = row
        k_base = k_ptr + kv_row * skb + kv_head * skh
        v_base = v_ptr + kv_row * svb + kv_head * svh
        for start in range(0, cols, BLOCK_N):
            if start < top:   # tiles past the largest limit are skipped (a dynamic bound the interpreter lacks)
                j = start + tl.arange(0, BLOCK_N)
                j_ok = j < top
                keys = tl.load(k_base + j[:, None] * skt + d[None, :] * skd, mask=j_ok[:, None], other=0.0)
                scores = tl.dot(q, tl.trans(keys), input_precision=PRECISION).to(tl.float32) * scale
                scores = tl.where(j[None, :] < limit[:, None], scores, float("-inf"))
                new_best = tl.maximum(best, tl.max(scores, axis=1))
                shift = tl.where(new_best == float("-inf"), 0.0, new_best)   # rows with nothing visible yet
                p = tl.exp(scores - shift[:, None])
                alpha = tl.exp(best - shift)
                total = total * alpha + tl.sum(p, axis=1)
                values = tl.load(v_base + j[:, None] * svt + d[None, :] * svd, mask=j_ok[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(values.dtype), values, input_precision=PRECISION).to(tl.float32)
                best = new_best
        out = acc / tl.maximum(total, 1e-30)[:, None]
        tl.store(o_ptr + row * sob + head[:, None] * soh + query[:, None] * soq + d[None, :] * sod,
                 out.to(o_ptr.dtype.element_ty), mask=m_ok[:, None])
