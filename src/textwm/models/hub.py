"""The generic readers of a checkpoint's JSON files: JSON, the tokenizer files' settings, added and named tokens.

Below the model families, which use them to fill in what published configs leave out (the SDAR block size from
the checkpoint's name and its mask id from the tokenizer; WeDLM's hard-coded mask id, the tokenizer's eos as a
stop); :func:`textwm.models.checkpoint.read_spec` asks the checkpoint's family for those (fixtures of the real
files: ``tests/models/fixtures/hub/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["TOKENIZER_FILES", "CheckpointError", "added_tokens", "as_ids", "read_json", "token_id", "token_name",
           "tokenizer_setting"]


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


def as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]
