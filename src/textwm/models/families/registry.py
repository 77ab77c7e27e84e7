"""The registry of model families: a name -> :class:`~textwm.models.families.contract.ModelFamily`.

The built-in families are named here once, as ``module:attribute`` strings imported on first use, so
``family_names()`` costs no import. Tests and users add their own with :func:`register`. Which family a
checkpoint is comes from its ``config.json`` (:func:`family_of`): a model type a family owns, else the family
marker, else :data:`DEFAULT_FAMILY`.
"""

from __future__ import annotations

import importlib
from typing import Any

from textwm.models.families.contract import ModelFamily

#: The built-in families: one line each.
BUILTIN: dict[str, str] = {
    "ar": "textwm.models.families.ar:AR",
    "sdar": "textwm.models.families.sdar:SDAR",
    "wedlm": "textwm.models.families.wedlm:WEDLM",
}
#: The family of a causal LM whose config names no other: plain left-to-right AR.
DEFAULT_FAMILY = "ar"
#: ``config.json`` key naming the family of a checkpoint whose model type does not (a Llama converted to SDAR
#: says ``"diffusion": "sdar"``, one converted to WeDLM ``"diffusion": "wedlm"``).
DIFFUSION_FIELD = "diffusion"

_registered: dict[str, ModelFamily] = {}


def register(family: ModelFamily, *, replace: bool = False) -> ModelFamily:
    """Add ``family`` under ``family.name``; a second family with a taken name is an error unless ``replace``."""
    if not family.name:
        raise ValueError("a model family needs a name")
    taken = family.name in BUILTIN or family.name in _registered
    if not replace and taken and _registered.get(family.name) is not family:
        raise ValueError(f"a model family named {family.name!r} is registered already")
    _registered[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family added with :func:`register` (a test's, after the test); the built-in ones stay."""
    if name in BUILTIN:
        raise ValueError(f"{name!r} is a built-in model family")
    _registered.pop(name, None)


def family_names() -> list[str]:
    """Names of every family: the built-in ones and those registered in this process."""
    return sorted({*BUILTIN, *_registered})


def get_family(name: str) -> ModelFamily:
    """The family ``name`` (a built-in one is imported on first use).

    Raises:
        KeyError: no family of that name (the message lists the registered ones).
    """
    if name not in _registered:
        if name not in BUILTIN:
            raise KeyError(f"unknown model family {name!r}; registered: {', '.join(family_names())}")
        module, _, attribute = BUILTIN[name].partition(":")
        _registered[name] = getattr(importlib.import_module(module), attribute)
    return _registered[name]


def family_of(config: dict[str, Any]) -> str:
    """The family of a ``config.json``: the family owning its model type, else the one its
    :data:`DIFFUSION_FIELD` marker names, else :data:`DEFAULT_FAMILY`."""
    families = [get_family(name) for name in family_names()]
    model_type, marker = config.get("model_type"), config.get(DIFFUSION_FIELD)
    owner = next((f.name for f in families if model_type in f.model_types), None)
    return owner or next((f.name for f in families if f.name == marker), DEFAULT_FAMILY)
