"""World-model checkpoints: AR causal LMs, SDAR block-diffusion models, the tiny-model factory.

Importing this package registers the ``sdar`` model type with transformers' Auto classes, so
SDAR checkpoints load with ``AutoModelForCausalLM`` and no ``trust_remote_code``.
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
from textwm.models.sdar import SDARConfig, SDARForCausalLM

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "LoadedModel",
    "ModelSpec",
    "SDARConfig",
    "SDARForCausalLM",
    "convert_to_block_diffusion",
    "load_model",
    "read_spec",
    "resolve_device",
]
