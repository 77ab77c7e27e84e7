"""The hub WeDLM checkpoint format (``model_type: "wedlm"``) without remote code.

Tencent's WeDLM checkpoints ship ``hf_compat/configuration_wedlm.py`` / ``modeling_wedlm.py`` as
remote code. Read side by side with transformers' Qwen2 / Qwen3, that modeling is the same network
with the same tensor names (``model.embed_tokens``, ``model.layers.<i>.self_attn.{q,k,v,o}_proj``,
``self_attn.{q,k}_norm``, ``mlp.{gate,up,down}_proj``, ``{input,post_attention}_layernorm``,
``model.norm``, ``lm_head``), RMSNorm and default RoPE over ``head_dim``, causal attention. Two
config switches select the variant (``WeDLMAttention``):

* ``qk_norm``: RMSNorm of each head's q and k before RoPE (Qwen3; WeDLM-8B) or none (Qwen2.5;
  WeDLM-7B);
* ``attention_bias``: a bias on q/k/v. Unlike Qwen3's attention, ``o_proj`` never has one.

Upstream's config defaults are the Qwen2.5 ones (``attention_bias=True``, ``qk_norm=False``), kept
here for configs that omit them. :class:`WeDLMForCausalLM` is Qwen3's model with those two switches
applied (identity q/k norms without ``qk_norm``, an unbiased ``o_proj``), so one class loads both.

``mask_token_id``: hub configs say ``null``; WeDLM's training and engine use 151665
(``finetune/src/trainer.py`` ``MASK_TOKEN_ID``, ``wedlm/engine/model_runner.py``
``_init_mask_token``), which in Qwen3's vocabulary is the ordinary token ``<tool_response>``. The
config resolves ``null`` to that id (announced by :func:`textwm.models.checkpoint.read_spec`,
which names the token in the checkpoint's tokenizer).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

from textwm.models.families.wedlm import WEDLM_MODEL_TYPE, WEDLM_TRAINING_MASK_ID
from textwm.models.sdar import HubConfigMixin

log = logging.getLogger(__name__)


class WeDLMConfig(HubConfigMixin, Qwen3Config):
    """Qwen3 config with WeDLM's two attention switches and its mask token."""

    model_type = WEDLM_MODEL_TYPE
    #: Per-head RMSNorm of q and k (Qwen3 style); upstream default False.
    qk_norm: bool = False
    #: Bias on q/k/v (never on o_proj); upstream default True.
    attention_bias: bool = True
    #: Mask token; ``None`` in a hub config means the training's hard-coded 151665.
    mask_token_id: int | None = None

    def __post_init__(self, **kwargs: Any):
        super().__post_init__(**kwargs)
        if self.mask_token_id is None:
            log.info("WeDLM config without mask_token_id: using %d, the id WeDLM's training hard-coded",
                     WEDLM_TRAINING_MASK_ID)
            self.mask_token_id = WEDLM_TRAINING_MASK_ID


class WeDLMForCausalLM(Qwen3ForCausalLM):
    """Qwen3ForCausalLM with WeDLM's attention switches (module docstring)."""

    config_class = WeDLMConfig

    def __init__(self, config: WeDLMConfig):
        super().__init__(config)
        for layer in self.model.layers:
            attn = layer.self_attn
            if not config.qk_norm:
                attn.q_norm, attn.k_norm = nn.Identity(), nn.Identity()
            if attn.o_proj.bias is not None:
                attn.o_proj = nn.Linear(attn.o_proj.in_features, attn.o_proj.out_features, bias=False,
                                        device=attn.o_proj.weight.device, dtype=attn.o_proj.weight.dtype)
                self._init_weights(attn.o_proj)


def _register() -> None:
    with contextlib.suppress(ValueError):  # already registered
        AutoConfig.register(WEDLM_MODEL_TYPE, WeDLMConfig)
    with contextlib.suppress(ValueError):
        AutoModelForCausalLM.register(WeDLMConfig, WeDLMForCausalLM)


_register()
