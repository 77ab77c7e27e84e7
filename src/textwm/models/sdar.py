"""The SDAR checkpoint format without remote code.

SDAR checkpoints are Qwen3 weights with identical tensor names; their ``config.json`` says
``model_type: "sdar"``, ``architectures: ["SDARForCausalLM"]`` and adds ``block_size`` and
``mask_token_id`` (JetAstra/SDAR ``training/model/*/configuration_sdar.py``). The classes below
are Qwen3's with that config, registered with the Auto classes on import, so
``AutoModelForCausalLM.from_pretrained(sdar_dir)`` works offline and the checkpoints we save
are the format lmdeploy's dllm backend and the SDAR repo read.
"""

from __future__ import annotations

import contextlib

from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

SDAR_MODEL_TYPE = "sdar"


class SDARConfig(Qwen3Config):
    """Qwen3 config plus the two block-diffusion fields."""

    model_type = SDAR_MODEL_TYPE
    #: Tokens per diffusion block the model was trained with.
    block_size: int = 4
    #: Id of the ``<|MASK|>`` token in the checkpoint's tokenizer.
    mask_token_id: int | None = None


class SDARForCausalLM(Qwen3ForCausalLM):
    """Qwen3ForCausalLM reading an SDAR config (the attention pattern is chosen by the caller's mask)."""

    config_class = SDARConfig


def _register() -> None:
    # ValueError: already registered (a re-import, or a transformers release that knows "sdar").
    with contextlib.suppress(ValueError):
        AutoConfig.register(SDAR_MODEL_TYPE, SDARConfig)
    with contextlib.suppress(ValueError):
        AutoModelForCausalLM.register(SDARConfig, SDARForCausalLM)


_register()
