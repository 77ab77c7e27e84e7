"""World-model checkpoints: AR causal LMs, SDAR block-diffusion models, WeDLM, the tiny-model factory.

Importing this package registers the ``sdar``, ``sdar_moe`` and ``wedlm`` model types with
transformers' Auto classes, so SDAR (dense and MoE) and Tencent's WeDLM checkpoints load with
``AutoModelForCausalLM`` and no ``trust_remote_code``.
"""

from textwm.models.checkpoint import (
    FAMILIES,
    CheckpointError,
    LoadedModel,
    ModelSpec,
    convert_to_block_diffusion,
    load_model,
    read_spec,
    resolve_device,
)
from textwm.models.sdar import SDARConfig, SDARForCausalLM, SDARMoeConfig, SDARMoeForCausalLM
from textwm.models.wedlm import WeDLMConfig, WeDLMForCausalLM

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "LoadedModel",
    "ModelSpec",
    "SDARConfig",
    "SDARForCausalLM",
    "SDARMoeConfig",
    "SDARMoeForCausalLM",
    "WeDLMConfig",
    "WeDLMForCausalLM",
    "convert_to_block_diffusion",
    "load_model",
    "read_spec",
    "resolve_device",
]
