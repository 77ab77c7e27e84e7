"""What a checkpoint's JSON files say, for the checkpoints published by the SDAR and WeDLM authors.

Hub configs leave out what their remote code or scripts hard-code; these rules fill it in, each
announced with a warning, so :func:`textwm.models.checkpoint.read_spec` classifies every checkpoint
as what it is (fixtures of the real files: ``tests/models/fixtures/hub/``):

* family by model type: ``sdar`` and ``sdar_moe`` (SDAR-30B-A3B) are ``sdar``, ``wedlm`` is
  ``wedlm``; checkpoints converted here say ``"diffusion": "sdar" | "wedlm"`` instead;
* SDAR block size, when ``config.json`` has none (every ``JetLM/SDAR-*-Chat*`` hub config): the
  ``-b<N>`` suffix of the checkpoint's name (``SDAR-8B-Chat-b32``), else 4, the base release's
  (SDAR ``generate.py --block_length`` default, ``SDARConfig.block_size`` default);
* SDAR mask id, when ``config.json`` has none: the id of the tokenizer's ``mask_token``
  (``<|MASK|>``, 151669), as SDAR's ``generate.py`` takes it (``tokenizer.mask_token``);
* WeDLM mask id, when ``config.json`` says ``null`` (every ``tencent/WeDLM-*`` hub config): 151665,
  the id WeDLM's training and engine hard-code; in Qwen3's vocabulary that is the ordinary token
  ``<tool_response>``, named in the warning from the checkpoint's own tokenizer files;
* WeDLM stop ids also include the tokenizer's eos token (WeDLM ``llm_engine.py`` adds it).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: config.json marker: "sdar" for a block-diffusion checkpoint whose architecture is not Qwen3,
#: "wedlm" for a WeDLM checkpoint converted here (any architecture).
DIFFUSION_FIELD = "diffusion"
SDAR_MODEL_TYPES = ("sdar", "sdar_moe")
WEDLM_MODEL_TYPE = "wedlm"
#: Block size of the SDAR base release (``JetLM/SDAR-*-Chat`` without a ``-b<N>`` suffix).
SDAR_RELEASE_BLOCK_SIZE = 4
#: The mask id WeDLM's training hard-coded (``finetune/src/trainer.py``: ``MASK_TOKEN_ID = 151665``;
#: ``wedlm/engine/model_runner.py`` ``_init_mask_token`` falls back to it).
WEDLM_TRAINING_MASK_ID = 151665
_BLOCK_SUFFIX = re.compile(r"-b(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint cannot be used as asked (missing fields, wrong family, not found).

    Defined here so the JSON rules can raise it; :mod:`textwm.models.checkpoint` re-exports it."""


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def family_of(config: dict[str, Any]) -> str:
    """``ar``, ``sdar`` or ``wedlm`` from ``config.json``'s model type or diffusion marker."""
    model_type = config.get("model_type")
    if model_type in SDAR_MODEL_TYPES or config.get(DIFFUSION_FIELD) == "sdar":
        return "sdar"
    if model_type == WEDLM_MODEL_TYPE or config.get(DIFFUSION_FIELD) == "wedlm":
        return "wedlm"
    return "ar"


def added_tokens(local: Path) -> dict[int, str]:
    """Added (special) tokens by id, from the first tokenizer file that lists them:
    ``tokenizer_config.json`` ``added_tokens_decoder`` (what transformers loads), ``added_tokens.json``,
    ``tokenizer.json`` ``added_tokens`` (read last: it holds the whole vocabulary)."""
    readers = (("tokenizer_config.json", lambda d: {int(i): t["content"] for i, t in
                                                   d.get("added_tokens_decoder", {}).items()}),
               ("added_tokens.json", lambda d: {int(i): name for name, i in d.items()}),
               ("tokenizer.json", lambda d: {int(t["id"]): t["content"] for t in d.get("added_tokens", [])}))
    for file, read in readers:
        if (local / file).is_file() and (tokens := read(read_json(local / file))):
            return tokens
    return {}


def tokenizer_setting(local: Path, key: str) -> str | None:
    """A named token of ``tokenizer_config.json`` (``mask_token``, ``eos_token``), or None."""
    path = local / "tokenizer_config.json"
    value = read_json(path).get(key) if path.is_file() else None
    return value.get("content") if isinstance(value, dict) else value


def token_id(local: Path, name: str) -> int | None:
    """Id of the added token ``name`` in the tokenizer files, or None."""
    return next((i for i, content in sorted(added_tokens(local).items()) if content == name), None)


TOKENIZER_FILES = ("tokenizer_config.json", "added_tokens.json", "tokenizer.json", "vocab.json")


def token_name(local: Path, token: int) -> str | None:
    """What ``token`` is in the checkpoint's tokenizer files (added tokens, then the BPE vocabulary of
    ``vocab.json`` / ``tokenizer.json``), or None."""
    name = added_tokens(local).get(token)
    for file, get in (("vocab.json", lambda d: d), ("tokenizer.json", lambda d: d.get("model", {}).get("vocab", {}))):
        if name is None and (local / file).is_file():
            name = next((t for t, i in get(read_json(local / file)).items() if i == token), None)
    return name


def block_size(local: Path, config: dict[str, Any], family: str, name: str, level: int = logging.WARNING) -> int | None:
    """The checkpoint's diffusion block size (module docstring); None for AR and for WeDLM hub configs.
    A filled-in value is announced at ``level``."""
    if config.get("block_size") is not None:
        return int(config["block_size"])
    if family != "sdar":
        return None
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


def mask_token_id(local: Path, config: dict[str, Any], family: str, level: int = logging.WARNING) -> int | None:
    """The checkpoint's mask id (module docstring); None for AR checkpoints and unknown SDAR ones.
    A filled-in value is announced at ``level``."""
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    if config.get("model_type") == WEDLM_MODEL_TYPE:
        return _wedlm_training_mask_id(local, config, level)
    if family == "sdar" and (mask := tokenizer_setting(local, "mask_token")) is not None:
        found = token_id(local, mask)
        if found is not None:
            log.log(level, "%s: config.json has no mask_token_id: using %d, the tokenizer's mask token %s "
                    "(as SDAR's generate.py does)", local, found, mask)
        return found
    return None


def _wedlm_training_mask_id(local: Path, config: dict[str, Any], level: int) -> int:
    vocab = config.get("vocab_size")
    if vocab is not None and int(vocab) <= WEDLM_TRAINING_MASK_ID:
        raise CheckpointError(
            f"{local}: WeDLM config with mask_token_id null, and its vocabulary ({vocab}) has no id "
            f"{WEDLM_TRAINING_MASK_ID}, the one WeDLM's training used; set mask_token_id in config.json")
    name = token_name(local, WEDLM_TRAINING_MASK_ID)
    if name is not None:
        what = f"which this tokenizer has as the ordinary token {name!r}: text containing it reads as a mask"
    elif any((local / f).is_file() for f in TOKENIZER_FILES):
        what = "which no token of this checkpoint's tokenizer files has (a spare embedding row)"
    else:
        what = "(no tokenizer files here to name the token it is)"
    log.log(level, "%s: WeDLM config with mask_token_id null: using %d, the id WeDLM's training hard-coded, %s",
            local, WEDLM_TRAINING_MASK_ID, what)
    return WEDLM_TRAINING_MASK_ID


def stop_ids(local: Path, config: dict[str, Any], family: str) -> list[int]:
    """Stop ids: ``generation_config.json`` ``eos_token_id`` (else ``config.json``'s); WeDLM also stops at
    the tokenizer's eos token."""
    gen = local / "generation_config.json"
    stops = as_ids(read_json(gen).get("eos_token_id")) if gen.is_file() else []
    stops = stops or as_ids(config.get("eos_token_id"))
    if family == "wedlm" and (eos := tokenizer_setting(local, "eos_token")) is not None:
        stops += as_ids(token_id(local, eos))
    return list(dict.fromkeys(stops))


def as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]
