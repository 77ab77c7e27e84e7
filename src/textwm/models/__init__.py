"""World-model checkpoints: the model-family registry, AR causal LMs, SDAR block-diffusion models, WeDLM, the
tiny-model factory.

The package imports without torch or transformers: config modules (the trainer's, the comparison's) read the
family registry (:mod:`textwm.models.families`) and stay light. The model classes (``SDARConfig``,
``WeDLMForCausalLM``, ...) are imported on first use; importing :mod:`textwm.models.sdar` and
:mod:`textwm.models.wedlm` (as ``load_model``, ``convert_checkpoint``, the trainer and the tiny factory do)
registers the ``sdar``, ``sdar_moe`` and ``wedlm`` model types with transformers' Auto classes, so SDAR (dense
and MoE) and Tencent's WeDLM checkpoints load with ``AutoModelForCausalLM`` and no ``trust_remote_code``.
"""

import importlib
from typing import Any

from textwm.models.checkpoint import (
    CheckpointError,
    LoadedModel,
    ModelSpec,
    convert_to_block_diffusion,
    load_model,
    read_spec,
    resolve_device,
)
from textwm.models.families import ModelFamily, family_names, get_family

#: The model classes, by the module that defines (and registers) them: imported on first use.
_MODEL_CLASSES = {
    "SDARConfig": "textwm.models.sdar", "SDARForCausalLM": "textwm.models.sdar",
    "SDARMoeConfig": "textwm.models.sdar", "SDARMoeForCausalLM": "textwm.models.sdar",
    "WeDLMConfig": "textwm.models.wedlm", "WeDLMForCausalLM": "textwm.models.wedlm",
}


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":   # the registered families' names, as of now (register() adds to them)
        return tuple(family_names())
    if name in _MODEL_CLASSES:
        return getattr(importlib.import_module(_MODEL_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "CheckpointError",
    "LoadedModel",
    "ModelFamily",
    "ModelSpec",
    "SDARConfig",
    "SDARForCausalLM",
    "SDARMoeConfig",
    "SDARMoeForCausalLM",
    "WeDLMConfig",
    "WeDLMForCausalLM",
    "convert_to_block_diffusion",
    "family_names",
    "get_family",
    "load_model",
    "read_spec",
    "resolve_device",
]
