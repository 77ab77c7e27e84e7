"""Lazy imports of optional dependencies with an install hint that names the extra."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message says which extra provides it."""


def require(module: str, extra: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or fail with the pip command that installs it.

    Args:
        module: dotted module name, e.g. ``"rouge_score.tokenizers"``.
        extra: the textwm extra that provides it, e.g. ``"metrics"``.
        package: the PyPI name when it differs from the top-level module name.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = package or module.split(".")[0]
        raise MissingDependencyError(
            f"{name} is required here but not installed. Install it with: pip install -e '.[{extra}]' "
            f"(from the textwm checkout) or pip install {name}"
        ) from exc
