"""What one training rank will hold on its GPU, estimated before the first step (``memory_check``).

The estimate adds the static part (fp32 master weights, gradients, optimizer states, the bf16 weight
copies autocast keeps for the backward; divided by the ranks where ZeRO / FSDP shard them) to the
activations of the largest micro-batch the data can produce, per decoder layer and token:

- kept (no checkpointing): what a Qwen3-style layer under bf16 autocast saves for its backward -
  the fp32 residual stream and RMSNorm outputs, the bf16 inputs and outputs of every matrix product,
  the SwiGLU intermediates and attention's outputs;
- ``ops`` checkpointing: only the matrix-product and attention outputs plus the layer input;
- ``full`` checkpointing: only the layer input (fp32), plus one layer's kept activations while it is
  recomputed;
- offloaded layers: nothing but that transient.

On top come the logits at the loss positions (``loss_impl: logits``: a bf16 and a float32 copy and
their gradients for every loss position) or one chunk of them (``chunked``).

Gradients and activations do not add up: the backward frees a layer's activations as it fills its
gradients, so the peak is at the start of the backward (activations) or at the optimizer step (all
gradients), whichever is larger. Compiled layers (``torch_compile``) keep fewer intermediates (inductor
fuses the element-wise ops and recomputes the cheap ones), and under compilation ``ops`` checkpointing
keeps what ``full`` keeps (measured: the same peak and step time; the checkpoint wraps the compiled
layer, so its policy sees one compiled call, not the matmuls inside it).

The scales below were fitted to the peaks (``torch.cuda.max_memory_allocated``) of 14 eager and 6
compiled arms of ``scripts/bench_train.py`` on an H200 (Qwen3 0.6B / 1.7B shapes, 151,936 vocabulary,
AR / SDAR / WeDLM, 16k-131k tokens a step; ``scripts/results/README.md``): the estimate is within
-5% / +10% of them, erring high.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from textwm.config import ConfigError
from textwm.models.families import get_family
from textwm.training.linear_ce import CHUNK_BYTES

GIB = 2**30
#: CUDA context, cuBLAS workspaces and allocator slack not seen by ``max_memory_allocated``.
RUNTIME_OVERHEAD = 1.5 * GIB
#: The estimate must fit under this share of the GPU's memory (the allocator fragments).
USABLE_SHARE = 0.95
#: Bytes of optimizer state per parameter by ``optim`` name (HF names; 8-bit: bitsandbytes).
OPTIMIZER_BYTES = {"8bit": 2, "adafactor": 0.1, "sgd": 4}
ADAM_BYTES = 8
#: Measured saved activations over :meth:`ModelShape.kept_bytes_per_token`'s count, eager (0.80-0.91 on
#: the H200 arms) and with compiled layers (0.50-0.54).
ACTIVATION_SCALE = 0.9
COMPILED_ACTIVATION_SCALE = 0.55


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of the model: parameters and the decoder layer's widths."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    q_width: int     # heads x head_dim
    kv_width: int    # kv heads x head_dim
    vocab: int

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        c = model.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return cls(params=sum(p.numel() for p in model.parameters()), layers=c.num_hidden_layers, hidden=c.hidden_size,
                   intermediate=c.intermediate_size, q_width=c.num_attention_heads * head_dim,
                   kv_width=c.num_key_value_heads * head_dim, vocab=c.vocab_size)

    def kept_bytes_per_token(self) -> float:
        """Saved activations of one layer per token with nothing recomputed (bf16 autocast, fp32 residual)."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_width, self.kv_width
        norms = 2 * 8 * h + 8 * (q + kv)            # input/post RMSNorm and q/k norms: fp32 input + output
        matmul_io = 3 * 2 * h + 2 * (q + 2 * kv) + 2 * q + 2 * 2 * h  # q/k/v input casts, q/k/v out, o_proj in, MLP casts
        attention = 2 * (q + kv) + 2 * q            # rotated q/k and the output (the fp32 lse is negligible)
        swiglu = 4 * 2 * i                          # gate, up, silu(gate), product
        return norms + matmul_io + attention + swiglu

    def ops_bytes_per_token(self) -> float:
        """Saved per token by ``ops`` checkpointing: matmul and attention outputs and the layer input."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_width, self.kv_width
        return 4 * h + 2 * (q + 2 * kv) + 2 * q + 2 * h + 2 * 2 * i + 2 * h


@dataclass(frozen=True)
class MemoryPlan:
    """The settings of one rank's step that decide its memory."""

    rows: int                  # per_device_train_batch_size
    row_tokens: int            # the longest row the data produces (tokens, after padding)
    noisy_tokens: int          # SDAR / WeDLM: the noisy copy's tokens per row (row_tokens untrimmed); AR: 0
    loss_share: float          # loss positions per input token (answer share, x2 for WeDLM's two terms)
    loss_impl: str = "logits"
    optim: str = "adamw_torch"
    checkpointing: bool = False
    mode: str = "full"
    every: int = 1
    offload: bool = False
    compiled: bool = False     # torch_compile of the decoder layers
    deepspeed: bool = False    # bf16 parameters with the fp32 master copy beside the optimizer states, no autocast
    offload_optimizer: bool = False   # DeepSpeed offload_optimizer: master weights and states in host memory
    offload_params: bool = False      # DeepSpeed ZeRO-3 offload_param
    shard_weights: int = 1     # ranks sharing the fp32 weights (ZeRO-3 / FSDP full_shard)
    shard_grads: int = 1       # ranks sharing gradients (ZeRO-2/3, FSDP)
    shard_optimizer: int = 1   # ranks sharing optimizer states (ZeRO-1/2/3, FSDP)


@dataclass(frozen=True)
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float

    @property
    def total(self) -> float:
        """The peak: the backward frees activations while it fills gradients, so only the larger counts."""
        return (self.weights + self.optimizer + self.logits + max(self.activations, self.gradients)
                + RUNTIME_OVERHEAD)

    def summary(self) -> str:
        parts = ", ".join(f"{name} {getattr(self, name) / GIB:.1f}" for name in ("weights", "optimizer", "logits"))
        return (f"{self.total / GIB:.1f} GiB ({parts}, the larger of activations {self.activations / GIB:.1f} and "
                f"gradients {self.gradients / GIB:.1f}, runtime {RUNTIME_OVERHEAD / GIB:.1f})")


def optimizer_bytes(optim: str) -> float:
    for key, size in OPTIMIZER_BYTES.items():
        if key in optim:
            return size
    return ADAM_BYTES


def estimate(shape: ModelShape, plan: MemoryPlan) -> MemoryEstimate:
    """Bytes one rank needs for a step of ``plan`` on a model of ``shape``."""
    n = shape.params
    optimizer = optimizer_bytes(plan.optim) * n / plan.shard_optimizer
    gradients = 4 * n / plan.shard_grads
    if plan.deepspeed:
        # DeepSpeed's model (not yet measured here): bf16 parameter shards; the fp32 master copy lives with the
        # optimizer states, both in host memory when offload_optimizer is on; bf16 gradient partitions.
        weights = 0.0 if plan.offload_params else 2 * n / plan.shard_weights
        optimizer = 0.0 if plan.offload_optimizer else optimizer + 4 * n / plan.shard_optimizer
        gradients = 2 * n / plan.shard_grads
    else:
        weights = (4 * n) / plan.shard_weights + 2 * n   # fp32 master (sharded) + autocast's bf16 copies
    tokens = plan.rows * (plan.row_tokens + plan.noisy_tokens)
    kept = shape.kept_bytes_per_token() * tokens * (COMPILED_ACTIVATION_SCALE if plan.compiled else ACTIVATION_SCALE)
    checkpointed = math.ceil(shape.layers / plan.every) if plan.checkpointing else 0
    plain = shape.layers - checkpointed
    keeps_ops = plan.mode == "ops" and not plan.compiled
    saved = shape.ops_bytes_per_token() * tokens * ACTIVATION_SCALE if keeps_ops else 4 * shape.hidden * tokens
    per_layer_plain = 0.0 if plan.offload else kept
    per_layer_ckpt = 0.0 if plan.offload else saved
    transient = kept if (checkpointed or plan.offload) else 0.0
    activations = plain * per_layer_plain + checkpointed * per_layer_ckpt + transient
    positions = plan.rows * plan.row_tokens * plan.loss_share
    # logits: bf16 + fp32 logits and both gradients at every loss position; chunked: one chunk (and its softmax)
    logits = 2 * CHUNK_BYTES if plan.loss_impl == "chunked" else positions * shape.vocab * 12
    return MemoryEstimate(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                          logits=logits)


def suggestions(shape: ModelShape, plan: MemoryPlan, budget: float) -> list[str]:
    """Config changes that bring the estimate under ``budget`` bytes, each with its estimate."""
    out = []
    candidates = [
        ("loss_impl: chunked", replace(plan, loss_impl="chunked")),
        ("gradient_checkpointing: true (gradient_checkpointing_mode: ops)",
         replace(plan, checkpointing=True, mode="ops", every=1)),
        ("gradient_checkpointing: true", replace(plan, checkpointing=True, mode="full", every=1)),
        ("gradient_checkpointing: true, loss_impl: chunked",
         replace(plan, checkpointing=True, mode="full", every=1, loss_impl="chunked")),
        ("gradient_checkpointing: true, activation_offload: true, loss_impl: chunked",
         replace(plan, checkpointing=True, mode="full", every=1, offload=True, loss_impl="chunked")),
        ("optim: adamw_bnb_8bit, gradient_checkpointing: true, loss_impl: chunked",
         replace(plan, optim="adamw_bnb_8bit", checkpointing=True, mode="full", every=1, loss_impl="chunked")),
    ]
    for text, changed in candidates:
        if changed != plan and estimate(shape, changed).total <= budget:
            out.append(f"{text} (~{estimate(shape, changed).total / GIB:.1f} GiB)")
    for rows in range(plan.rows - 1, 0, -1):
        smaller = replace(plan, rows=rows)
        if estimate(shape, smaller).total <= budget:
            acc = math.ceil(plan.rows / rows)
            out.append(f"per_device_train_batch_size: {rows} with gradient_accumulation_steps x{acc} "
                       f"(~{estimate(shape, smaller).total / GIB:.1f} GiB)")
            break
    if not out:
        out.append("shard the model over more GPUs (deepspeed: sdar/configs/ds_z3.json) or lower cutoff_len")
    return out


def _offloaded(zero: dict, key: str) -> bool:
    return str((zero.get(key) or {}).get("device", "none")).lower() in ("cpu", "nvme")


def zero_shards(deepspeed_config: dict | None, fsdp: str, world_size: int) -> dict[str, Any]:
    """The sharding and offload fields of :class:`MemoryPlan` for a DeepSpeed ZeRO config or an FSDP spec."""
    out: dict[str, Any] = {}
    if deepspeed_config is not None:
        zero = deepspeed_config.get("zero_optimization") or {}
        out = {"deepspeed": True, "offload_optimizer": _offloaded(zero, "offload_optimizer"),
               "offload_params": _offloaded(zero, "offload_param")}
    if world_size <= 1:
        return out
    if deepspeed_config is not None:
        stage = int((deepspeed_config.get("zero_optimization") or {}).get("stage", 0))
        return {**out, "shard_optimizer": world_size if stage >= 1 else 1,
                "shard_grads": world_size if stage >= 2 else 1, "shard_weights": world_size if stage >= 3 else 1}
    if "full_shard" in fsdp:
        return {"shard_optimizer": world_size, "shard_grads": world_size, "shard_weights": world_size}
    if "shard_grad_op" in fsdp:
        return {"shard_optimizer": world_size, "shard_grads": world_size}
    return {}


def plan_for(config: Any, *, row_tokens: int, answer_share: float, noisy_tokens: int | None = None,
             world_size: int = 1, deepspeed_config: dict | None = None) -> MemoryPlan:
    """The :class:`MemoryPlan` of an :class:`~textwm.training.sft_config.SFTConfig` run whose longest
    (padded) training row has ``row_tokens`` tokens and whose answer tokens are ``answer_share`` of all.

    ``noisy_tokens``: the longest noisy copy of a row (SDAR / WeDLM compute only the blocks that can hold a
    mask, :mod:`textwm.diffusion.noisy_stream`); None takes the whole row, the bound for any data. Whether the
    objective has a noisy copy, and how many loss terms an answer token has, its objective class says."""
    objective = get_family(config.objective).objective_class()
    noisy = (row_tokens if noisy_tokens is None else min(noisy_tokens, row_tokens)) if objective.noisy_copy else 0
    return MemoryPlan(rows=config.per_device_train_batch_size, row_tokens=row_tokens, noisy_tokens=noisy,
                      loss_share=min(1.0, answer_share * objective.answer_loss_terms),
                      loss_impl=config.loss_impl, optim=config.optim, checkpointing=config.gradient_checkpointing,
                      mode=config.gradient_checkpointing_mode, every=config.gradient_checkpointing_every,
                      offload=config.activation_offload, compiled=config.torch_compile,
                      **zero_shards(deepspeed_config, config.fsdp or "", world_size))


class MemoryCheckError(ConfigError):
    """The estimate does not fit the GPU (the message lists config changes that would)."""


def check_fits(shape: ModelShape, plan: MemoryPlan, device_bytes: float, *, on_fail: str) -> tuple[bool, str]:
    """Compare the estimate with ``device_bytes``: ``(fits, the line to log)``; raises
    :class:`MemoryCheckError` when it does not fit and ``on_fail`` is ``error``."""
    est = estimate(shape, plan)
    budget = USABLE_SHARE * device_bytes
    line = f"memory estimate per GPU: {est.summary()} of {device_bytes / GIB:.1f} GiB"
    if est.total <= budget:
        return True, line
    message = (f"{line}: this step will not fit ({plan.rows} rows x {plan.row_tokens} tokens"
               f"{f' + {plan.noisy_tokens} of the noisy copy' if plan.noisy_tokens else ''}). Change one of:\n  - "
               + "\n  - ".join(suggestions(shape, plan, budget))
               + "\n(memory_check: warn starts anyway; the estimate was within -5% / +10% of the H200 peaks it was "
                  "fitted to, eager and compiled, one GPU)")
    if on_fail == "error":
        raise MemoryCheckError(message)
    return False, message
