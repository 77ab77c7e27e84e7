"""What every command line checks or maps before its work: output paths it must be able to write (so that a bad one
fails in a second, not after hours), and flags of another tool's spelling mapped onto a config's."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from textwm.config import ConfigError


def check_output_dir(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a folder this process can write (it or its nearest existing parent writable; nothing is
    created); ConfigError naming ``key`` otherwise. Called by every entry point before its work, so a bad
    output path fails in a second, not after hours."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{path} is a file, not a folder", key=key)
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{path} cannot be created: {existing} is a file", key=key)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write into {path}: {existing} is not writable", key=key)
    return p


def check_output_file(path: str | os.PathLike, key: str) -> Path:
    """``path`` as a file this process can write (its folder checked by :func:`check_output_dir`)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{path} is a folder, not a file", key=key)
    check_output_dir(p.parent if str(p.parent) else ".", key)
    return p


def json_object(text: str, key: str) -> dict[str, Any]:
    """``text`` read as a JSON object (``{}`` when empty); ConfigError naming ``key`` otherwise."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"is not JSON: {exc}", key=key) from None
    if not isinstance(value, dict):
        raise ConfigError("must be a JSON object", key=key)
    return value


def take_flags(argv: Sequence[str], flags: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """The values of ``flags`` (``--flag VALUE`` or ``--flag=VALUE``, spelled exactly; the last one wins) out of
    ``argv``, and the rest of it in order: for command lines of another tool's spelling that are mapped onto a
    config's before it is parsed. A flag without its value raises ConfigError."""
    wanted, found, rest = set(flags), {}, []
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, value = token.partition("=")
        if name in wanted and eq:
            found[name.lstrip("-").replace("-", "_")] = value
        elif token in wanted:
            if i + 1 >= len(args):
                raise ConfigError("needs a value", key=token)
            found[token.lstrip("-").replace("-", "_")] = args[i + 1]
            i += 1
        else:
            rest.append(token)
        i += 1
    return found, rest
