"""The trainer's speed and memory switches, applied to the model before the HF Trainer wraps it.

Each is a config key (:class:`~textwm.training.sft_config.SFTConfig`) and is announced in the log:

- ``gradient_checkpointing`` with ``gradient_checkpointing_mode`` ``full`` (a layer keeps only its
  input and recomputes the rest in the backward) or ``ops`` (selective: the outputs of the matrix
  products and of attention are kept, only the cheap element-wise ops - norms, SwiGLU, RoPE, casts -
  are recomputed), on every ``gradient_checkpointing_every``-th decoder layer (selective by layer);
- ``activation_offload``: what a decoder layer saves for the backward (with checkpointing: only its
  input) is held in pinned host memory (``torch.autograd.graph.save_on_cpu``) and copied back in the
  backward;
- ``enable_liger_kernel``: liger-kernel's fused Triton RMSNorm, RoPE and SwiGLU (LlamaFactory's key);
- ``torch_compile``: each decoder layer compiled on its own (regional compilation: one compiled
  graph reused by every layer, a short compile, the attention mask passed in as it is). A checkpointed
  layer recomputes its compiled call whole, so with compilation ``ops`` checkpointing keeps what ``full``
  keeps (the policy sees one call, not the matmuls inside it; measured on the H200: the same peak and time).

All of them leave the loss unchanged up to float rounding (tests: CPU for checkpointing, offload and
compile; the GPU tier for liger and for compile under flex attention and bf16).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from textwm.config import ConfigError
from textwm.training.sft_config import CHECKPOINT_MODES


class SpeedupError(ConfigError):
    """A switch that cannot apply to this model or machine (the message says which and why)."""


def decoder_layers(model: Any) -> list[Any]:
    """The model's decoder layers (``model.model.layers`` of the HF causal LMs used here)."""
    prefix = getattr(model, "base_model_prefix", "model")
    layers = getattr(getattr(model, prefix, None), "layers", None)
    if layers is None or not len(layers):
        raise SpeedupError(f"{type(model).__name__} has no decoder layers at <model>.{prefix}.layers")
    return list(layers)


def _saved_ops() -> set[Any]:
    """The ops whose outputs ``ops`` checkpointing keeps: matrix products and attention."""
    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
    ops = {getattr(aten, name).default for name in names if hasattr(aten, name)}
    # torch's private module, present only in the versions that have flex attention
    from torch._higher_order_ops.flex_attention import flex_attention
    ops.add(flex_attention)
    return ops


def _keep_matmuls_context() -> tuple[Any, Any]:
    saved = _saved_ops()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def _offloaded(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with the tensors autograd saves during it held in pinned host memory."""
    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
            return call(*args, **kwargs)
    return run


def _plain_call(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


def apply_layer_memory_options(model: Any, *, checkpointing: bool, mode: str = "full", every: int = 1,
                               offload: bool = False) -> str:
    """Checkpoint every ``every``-th decoder layer (``mode`` full or ops) and/or offload what layers save.

    Uses the HF ``GradientCheckpointingLayer`` contract: a layer whose ``gradient_checkpointing`` is
    set calls itself through ``_gradient_checkpointing_func`` in training mode. Layers that are not
    checkpointed go through a plain call, offloaded when ``offload``. Returns a one-line description.
    """
    if mode not in CHECKPOINT_MODES:
        raise SpeedupError(f"gradient_checkpointing_mode must be one of {', '.join(CHECKPOINT_MODES)}, got {mode!r}")
    if every < 1:
        raise SpeedupError(f"gradient_checkpointing_every must be >= 1, got {every}")
    if not checkpointing and not offload:
        return "activations: all kept (no checkpointing, no offload)"
    # heavy: loads transformers
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = decoder_layers(model)
    extra = {"context_fn": _keep_matmuls_context} if mode == "ops" else {}
    recompute = functools.partial(checkpoint, use_reentrant=False, **extra)
    checkpointed = [i for i in range(len(layers)) if checkpointing and i % every == 0]
    for i, layer in enumerate(layers):
        if not isinstance(layer, GradientCheckpointingLayer):
            raise SpeedupError(f"{type(layer).__name__} is not an HF GradientCheckpointingLayer: its "
                               "activations cannot be checkpointed or offloaded here")
        if i not in checkpointed and not offload:
            continue
        call = recompute if i in checkpointed else _plain_call
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = _offloaded(call) if offload else call
    model.config.use_cache = False
    parts = []
    if checkpointed:
        what = "recompute all but the layer input" if mode == "full" else "keep matmul/attention outputs, recompute the rest"
        parts.append(f"checkpointing ({mode}: {what}) on {len(checkpointed)}/{len(layers)} decoder layers")
    if offload:
        parts.append("saved activations of every decoder layer offloaded to pinned host memory")
    return "activations: " + "; ".join(parts)


def _liger_patch(model: Any) -> Callable[..., None]:
    try:
        # optional extra: liger-kernel
        from liger_kernel.transformers import monkey_patch
    except ImportError:
        raise SpeedupError("enable_liger_kernel needs liger-kernel: pip install liger-kernel==0.8.5 "
                           "(or pip install -e '.[speed]')") from None
    # heavy: loads transformers
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM

    by_class = ((Qwen3MoeForCausalLM, "apply_liger_kernel_to_qwen3_moe"), (Qwen3ForCausalLM, "apply_liger_kernel_to_qwen3"),
                (Qwen2ForCausalLM, "apply_liger_kernel_to_qwen2"), (LlamaForCausalLM, "apply_liger_kernel_to_llama"))
    for cls, name in by_class:
        if isinstance(model, cls):
            return getattr(monkey_patch, name)
    raise SpeedupError(f"enable_liger_kernel: no liger-kernel patch for {type(model).__name__} "
                       f"(known: {', '.join(cls.__name__ for cls, _ in by_class)})")


def apply_liger_kernels(model: Any) -> str:
    """liger-kernel's fused RMSNorm, RoPE and SwiGLU on ``model``'s modules (its cross-entropy is left
    out: the objectives take their own loss, at their own positions).

    Note that liger patches the transformers module of the family too (its RoPE is a module-level
    function), so other models of that family built later in the process get the kernels as well.
    """
    if not torch.cuda.is_available():
        raise SpeedupError("enable_liger_kernel: liger-kernel's kernels are Triton GPU kernels and no CUDA "
                           "device is visible; set enable_liger_kernel: false")
    patch = _liger_patch(model)
    patch(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False, model=model)
    return f"liger-kernel ({patch.__name__}): fused RMSNorm, RoPE and SwiGLU"


def compile_layers(model: Any) -> str:
    """``torch.compile`` each decoder layer in place (the embedding, final norm and loss stay eager)."""
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile()
    return f"torch.compile: {len(layers)} decoder layers compiled (regional; the first steps include the compile)"


#: HF ``optim`` names served by bitsandbytes (the torchao ones, ``adamw_torch_4bit`` / ``_8bit``, are not).
BITSANDBYTES_OPTIMS = frozenset({
    "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "lion_8bit", "lion_32bit",
    "paged_lion_32bit", "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "ademamix",
    "ademamix_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit"})


def needs_bitsandbytes(optim: str) -> bool:
    return optim in BITSANDBYTES_OPTIMS or "bnb" in optim


def check_packages(config: Any) -> None:
    """Before anything loads: the optional packages the config's switches need are importable."""

    needs = []
    if config.enable_liger_kernel:
        needs.append(("liger_kernel", "enable_liger_kernel: true", "liger-kernel==0.8.5"))
    if needs_bitsandbytes(config.optim):
        needs.append(("bitsandbytes", f"optim: {config.optim}", "bitsandbytes"))
    for module, what, package in needs:
        if importlib.util.find_spec(module) is None:
            raise SpeedupError(f"{what} needs {package}: pip install {package} (or pip install -e '.[speed]')")


def apply_config(model: Any, config: Any) -> list[str]:
    """Apply the config's switches to ``model`` in the order they compose (kernels, then the layer
    wrappers, then compilation of the wrapped layers); returns the lines to log."""
    lines = []
    if config.enable_liger_kernel:
        lines.append(apply_liger_kernels(model))
    lines.append(apply_layer_memory_options(model, checkpointing=config.gradient_checkpointing,
                                            mode=config.gradient_checkpointing_mode,
                                            every=config.gradient_checkpointing_every,
                                            offload=config.activation_offload))
    if config.torch_compile:
        lines.append(compile_layers(model))
    return lines
