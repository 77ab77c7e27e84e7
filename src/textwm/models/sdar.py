"""The SDAR checkpoint formats without remote code: dense (``sdar``) and MoE (``sdar_moe``).

SDAR checkpoints are Qwen3 weights with identical tensor names; their ``config.json`` says
``model_type: "sdar"``, ``architectures: ["SDARForCausalLM"]`` and may add ``block_size`` and
``mask_token_id`` (JetAstra/SDAR ``training/model/*/configuration_sdar.py``). SDAR-30B-A3B is the
same over Qwen3-MoE: ``model_type: "sdar_moe"``, ``architectures: ["SDARMoeForCausalLM"]``, Qwen3-MoE
tensor names (``mlp.gate``, ``mlp.experts.<i>.{gate,up,down}_proj``; lmdeploy
``pytorch/models/sdar_moe.py`` loads exactly these). The classes below are Qwen3's / Qwen3-MoE's
with those configs, registered with the Auto classes on import, so
``AutoModelForCausalLM.from_pretrained(sdar_dir)`` works offline without ``trust_remote_code``
(our registered model type wins over a hub config's ``auto_map``), and the checkpoints we save are
the format lmdeploy's dllm backend and the SDAR repo read.

MoE weights: transformers 5 keeps a layer's experts fused (``experts.gate_up_proj [E, 2I, H]``,
``experts.down_proj [E, H, I]``) and converts the per-expert checkpoint tensors on load and back on
save by the Qwen3-MoE conversion mapping, which is registered here for ``sdar_moe`` too. Routing is
per token (softmax top-k over ``mlp.gate``), so it does not interact with our attention masks or KV
caches.
"""

from __future__ import annotations

import contextlib
from typing import Any

from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.conversion_mapping import (
    get_checkpoint_conversion_mapping,
    register_checkpoint_conversion_mapping,
)

SDAR_MODEL_TYPE = "sdar"
SDAR_MOE_MODEL_TYPE = "sdar_moe"


#: Keys of a hub ``config.json`` that say how to run it rather than what the model is, ignored:
#: ``auto_map`` (these classes replace its remote code, and a checkpoint we save next to no ``*.py``
#: files must not point at them); ``attn_implementation`` (SDAR hub configs ask for
#: ``flex_attention``, their training kernel, which has no backward on CPU: the caller chooses;
#: ``load_model`` uses SDPA unless told, the trainer flex attention on a GPU).
HUB_RUNTIME_KEYS = ("auto_map", "attn_implementation")


class HubConfigMixin:
    """Reads a hub ``config.json`` without its :data:`HUB_RUNTIME_KEYS` (the caller's own
    ``attn_implementation`` argument still applies)."""

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):
        return super().from_dict({k: v for k, v in config_dict.items() if k not in HUB_RUNTIME_KEYS}, **kwargs)


class SDARConfig(HubConfigMixin, Qwen3Config):
    """Qwen3 config plus the two block-diffusion fields."""

    model_type = SDAR_MODEL_TYPE
    #: Tokens per diffusion block the model was trained with.
    block_size: int = 4
    #: Id of the ``<|MASK|>`` token in the checkpoint's tokenizer.
    mask_token_id: int | None = None


class SDARForCausalLM(Qwen3ForCausalLM):
    """Qwen3ForCausalLM reading an SDAR config (the attention pattern is chosen by the caller's mask)."""

    config_class = SDARConfig


class SDARMoeConfig(HubConfigMixin, Qwen3MoeConfig):
    """Qwen3-MoE config plus the two block-diffusion fields (SDAR-30B-A3B)."""

    model_type = SDAR_MOE_MODEL_TYPE
    #: Tokens per diffusion block the model was trained with.
    block_size: int = 4
    #: Id of the ``<|MASK|>`` token in the checkpoint's tokenizer.
    mask_token_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Also write ``num_experts``: transformers 5 names it ``num_local_experts``, while the SDAR
        config class and lmdeploy (``config.num_experts``) read the Qwen3-MoE name."""
        out = super().to_dict()
        out["num_experts"] = self.num_local_experts
        return out


class SDARMoeForCausalLM(Qwen3MoeForCausalLM):
    """Qwen3MoeForCausalLM reading an SDAR-MoE config."""

    config_class = SDARMoeConfig


def _register_moe_weight_conversion() -> None:
    mapping = get_checkpoint_conversion_mapping("qwen3_moe")
    if mapping is None:
        raise ImportError("this transformers release has no Qwen3-MoE weight conversion mapping; "
                          "SDAR-MoE checkpoints need transformers>=5 with Qwen3-MoE support")
    with contextlib.suppress(ValueError):  # already registered
        register_checkpoint_conversion_mapping(SDAR_MOE_MODEL_TYPE, mapping)


def _register() -> None:
    # ValueError: already registered (a re-import, or a transformers release that knows the type).
    for model_type, config_cls, model_cls in ((SDAR_MODEL_TYPE, SDARConfig, SDARForCausalLM),
                                              (SDAR_MOE_MODEL_TYPE, SDARMoeConfig, SDARMoeForCausalLM)):
        with contextlib.suppress(ValueError):
            AutoConfig.register(model_type, config_cls)
        with contextlib.suppress(ValueError):
            AutoModelForCausalLM.register(config_cls, model_cls)
    _register_moe_weight_conversion()


_register()
