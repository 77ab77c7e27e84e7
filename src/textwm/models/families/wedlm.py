"""The WeDLM family (Tencent/WeDLM): topological reordering under causal attention, trained with the masked-token
and the AR loss; decoded by streaming parallel decoding in a sliding window.

Its checkpoints: Tencent's carry ``model_type: "wedlm"`` (:mod:`textwm.models.wedlm`); ones converted here keep
their architecture and model type (WeDLM decodes with ordinary causal attention) and say ``"diffusion":
"wedlm"``, with ``mask_token_id`` and ``block_size`` (the training block of the masking ratios). What the
published configs leave out is filled in (fixtures of the real files: ``tests/models/fixtures/hub/``):

* mask id, when ``config.json`` says ``null`` (every ``tencent/WeDLM-*`` hub config): 151665, the id WeDLM's
  training and engine hard-code; in Qwen3's vocabulary that is the ordinary token ``<tool_response>``, named in
  the warning from the checkpoint's own tokenizer files;
* stop ids also include the tokenizer's eos token (WeDLM ``llm_engine.py`` adds it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from textwm.models import hub
from textwm.models.families.contract import ModelFamily
from textwm.models.hub import CheckpointError

log = logging.getLogger(__name__)

WEDLM_MODEL_TYPE = "wedlm"
#: The mask id WeDLM's training hard-coded (``finetune/src/trainer.py``: ``MASK_TOKEN_ID = 151665``;
#: ``wedlm/engine/model_runner.py`` ``_init_mask_token`` falls back to it).
WEDLM_TRAINING_MASK_ID = 151665


def plain_classes(config: Any) -> tuple[type, type]:
    """Qwen3 (``qk_norm``, no attention bias) or Qwen2.5 (no ``qk_norm``, a q/k/v bias): the networks under a hub
    WeDLM config (:mod:`textwm.models.wedlm`)."""
    # heavy: loads transformers
    import transformers as tf

    if config.qk_norm and not config.attention_bias:
        return tf.Qwen3Config, tf.Qwen3ForCausalLM
    if not config.qk_norm and config.attention_bias:
        return tf.Qwen2Config, tf.Qwen2ForCausalLM
    raise CheckpointError(f"WeDLM config with qk_norm={config.qk_norm} and attention_bias={config.attention_bias} "
                          "is neither Qwen3 nor Qwen2.5: it has no plain causal-LM class to be saved as")


def training_mask_id(local: Path, config: dict[str, Any], level: int) -> int | None:
    """151665 for a hub WeDLM config (``model_type: "wedlm"``) without a mask id; None for a converted one."""
    if config.get("model_type") != WEDLM_MODEL_TYPE:
        return None
    vocab = config.get("vocab_size")
    if vocab is not None and int(vocab) <= WEDLM_TRAINING_MASK_ID:
        raise CheckpointError(
            f"{local}: WeDLM config with mask_token_id null, and its vocabulary ({vocab}) has no id "
            f"{WEDLM_TRAINING_MASK_ID}, the one WeDLM's training used; set mask_token_id in config.json")
    name = hub.token_name(local, WEDLM_TRAINING_MASK_ID)
    if name is not None:
        what = f"which this tokenizer has as the ordinary token {name!r}: text containing it reads as a mask"
    elif any((local / f).is_file() for f in hub.TOKENIZER_FILES):
        what = "which no token of this checkpoint's tokenizer files has (a spare embedding row)"
    else:
        what = "(no tokenizer files here to name the token it is)"
    log.log(level, "%s: WeDLM config with mask_token_id null: using %d, the id WeDLM's training hard-coded, %s",
            local, WEDLM_TRAINING_MASK_ID, what)
    return WEDLM_TRAINING_MASK_ID


WEDLM = ModelFamily(
    name="wedlm",
    objective="textwm.training.objectives:WeDLMObjective",
    decoder="textwm.generation.wedlm:WeDLMDecoder",
    engine_rows="textwm.generation.engine.wedlm_rows:WeDLMRows",
    masked=True,
    model_types=(WEDLM_MODEL_TYPE,),
    plain_classes=plain_classes,
    default_mask_token_id=training_mask_id,
    stops_at_tokenizer_eos=True,
    conversion_note="{path} is a {family} checkpoint: marked as WeDLM (masking block {block}, mask id {mask}); "
                    "checkpoints keep its architecture",
)
