"""What a checkpoint's JSON files say: its family, block size, mask id and stop ids.

Published configs leave out what their remote code or scripts hard-code; each family fills that in by its
own rules (:mod:`textwm.models.families.sdar`: the SDAR block size from the checkpoint's name, the mask id
from its tokenizer; :mod:`textwm.models.families.wedlm`: WeDLM's hard-coded mask id, the tokenizer's eos as a
stop), each announced with a warning, so :func:`textwm.models.checkpoint.read_spec` classifies every
checkpoint as what it is (fixtures of the real files: ``tests/models/fixtures/hub/``). This module holds the
generic readers (JSON, the tokenizer files' added and named tokens) and asks the checkpoint's family for the
rest; which family a config is comes from :func:`~textwm.models.families.registry.family_of`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from textwm.models.families.registry import DIFFUSION_FIELD, family_of, get_family

__all__ = ["DIFFUSION_FIELD", "TOKENIZER_FILES", "CheckpointError", "added_tokens", "as_ids", "block_size",
           "family_of", "mask_token_id", "read_json", "stop_ids", "token_id", "token_name", "tokenizer_setting"]


class CheckpointError(ValueError):
    """A checkpoint cannot be used as asked (missing fields, wrong family, not found).

    Defined here so the JSON rules can raise it; :mod:`textwm.models.checkpoint` re-exports it."""


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


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
    """The checkpoint's diffusion block size: ``config.json``'s, else the family's fill-in (None for AR and for
    WeDLM hub configs). A filled-in value is announced at ``level``; ``name``: the path or hub id given."""
    if config.get("block_size") is not None:
        return int(config["block_size"])
    return get_family(family).default_block_size(local, config, name, level)


def mask_token_id(local: Path, config: dict[str, Any], family: str, level: int = logging.WARNING) -> int | None:
    """The checkpoint's mask id: ``config.json``'s, else the family's fill-in (None for AR checkpoints and unknown
    SDAR ones). A filled-in value is announced at ``level``."""
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    return get_family(family).default_mask_token_id(local, config, level)


def stop_ids(local: Path, config: dict[str, Any], family: str) -> list[int]:
    """Stop ids: ``generation_config.json`` ``eos_token_id`` (else ``config.json``'s), and the tokenizer's eos token
    where the family stops at it (WeDLM)."""
    gen = local / "generation_config.json"
    stops = as_ids(read_json(gen).get("eos_token_id")) if gen.is_file() else []
    stops = stops or as_ids(config.get("eos_token_id"))
    if get_family(family).stops_at_tokenizer_eos and (eos := tokenizer_setting(local, "eos_token")) is not None:
        stops += as_ids(token_id(local, eos))
    return list(dict.fromkeys(stops))


def as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]
