"""The SDAR family: block diffusion (JetAstra/SDAR). Masked-token cross-entropy per block over the doubled
input ``[x_t, x_0]`` with a block-causal mask; decoded block by block by parallel unmasking, with a KV cache of
the finished blocks.

Its checkpoints: Qwen3-based ones carry ``model_type: "sdar"`` and Qwen3-MoE ones ``"sdar_moe"`` (the SDAR
release formats, :mod:`textwm.models.sdar`); other architectures keep their model type and say
``"diffusion": "sdar"``. What the published configs leave out (every ``JetLM/SDAR-*-Chat*`` hub config; fixtures
of the real files: ``tests/models/fixtures/hub/``) is filled in, each announced with a warning:

* block size: the ``-b<N>`` suffix of the checkpoint's name (``SDAR-8B-Chat-b32``), else 4, the base release's
  (SDAR ``generate.py --block_length`` default, ``SDARConfig.block_size`` default);
* mask id: the id of the tokenizer's ``mask_token`` (``<|MASK|>``, 151669), as SDAR's ``generate.py`` takes it
  (``tokenizer.mask_token``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from textwm.models import hub
from textwm.models.families.contract import ModelFamily

log = logging.getLogger(__name__)

#: The SDAR release model types: dense (Qwen3) and MoE (Qwen3-MoE, SDAR-30B-A3B).
SDAR_MODEL_TYPES = ("sdar", "sdar_moe")
#: Block size of the SDAR base release (``JetLM/SDAR-*-Chat`` without a ``-b<N>`` suffix).
SDAR_RELEASE_BLOCK_SIZE = 4
_BLOCK_SUFFIX = re.compile(r"-b(\d+)$")


def own_classes(model_type: str) -> tuple[type, type] | None:
    """The SDAR release classes over Qwen3 (``SDARForCausalLM``) and Qwen3-MoE (``SDARMoeForCausalLM``), the
    format lmdeploy's dllm backend and the SDAR repo read; None for other architectures (they are marked)."""
    # heavy: the SDAR classes load torch and transformers
    from textwm.models.sdar import SDARConfig, SDARForCausalLM, SDARMoeConfig, SDARMoeForCausalLM

    dense, moe = (SDARConfig, SDARForCausalLM), (SDARMoeConfig, SDARMoeForCausalLM)
    return {"qwen3": dense, "sdar": dense, "qwen3_moe": moe, "sdar_moe": moe}.get(model_type)


def plain_classes(config: Any) -> tuple[type, type]:
    """Qwen3 / Qwen3-MoE: the architectures under the SDAR release classes."""
    # heavy: loads transformers
    import transformers as tf

    if config.model_type == "sdar_moe":
        return tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM
    return tf.Qwen3Config, tf.Qwen3ForCausalLM


def release_block_size(local: Path, config: dict[str, Any], name: str, level: int) -> int:
    """The block size of an SDAR config without one: its name's ``-b<N>`` suffix, else the base release's."""
    suffix = next((m for part in _names(local, name) if (m := _BLOCK_SUFFIX.search(part))), None)
    size, why = (int(suffix.group(1)), f"the -b{suffix.group(1)} suffix of its name") if suffix else (
        SDAR_RELEASE_BLOCK_SIZE, "the SDAR base release's")
    log.log(level, "%s: config.json has no block_size: using %d, %s (add \"block_size\" to config.json if it "
            "was trained with another)", local, size, why)
    return size


def _names(local: Path, name: str) -> list[str]:
    """The checkpoint's own names: the hub id or folder it was given as, its folder, and the repository
    folder of a hub cache snapshot (``models--JetLM--SDAR-8B-Chat-b32/snapshots/<hash>``)."""
    parts = local.parts
    cache = [parts[i - 1] for i in range(1, len(parts)) if parts[i] == "snapshots"]
    return [Path(name).name, local.name, *cache]


def tokenizer_mask_id(local: Path, config: dict[str, Any], level: int) -> int | None:
    """The id of the tokenizer's ``mask_token`` (None without one)."""
    mask = hub.tokenizer_setting(local, "mask_token")
    if mask is None:
        return None
    found = hub.token_id(local, mask)
    if found is not None:
        log.log(level, "%s: config.json has no mask_token_id: using %d, the tokenizer's mask token %s "
                "(as SDAR's generate.py does)", local, found, mask)
    return found


SDAR = ModelFamily(
    name="sdar",
    objective="textwm.training.objectives:SDARObjective",
    decoder="textwm.generation.sdar:SDARDecoder",
    engine_rows="textwm.generation.engine.sdar_rows:SDARRows",
    masked=True,
    block_causal=True,
    model_types=SDAR_MODEL_TYPES,
    own_classes=own_classes,
    plain_classes=plain_classes,
    default_block_size=release_block_size,
    default_mask_token_id=tokenizer_mask_id,
    conversion_note="{path} is a {family} checkpoint: converted to block diffusion (block {block}, mask id {mask}); "
                    "checkpoints are saved in SDAR format",
)
