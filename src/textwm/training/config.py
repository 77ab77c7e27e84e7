"""Reading and writing the SFT trainer's config: YAML plus ``key=value`` overrides, in our keys or the paper's.

The config itself is :class:`~textwm.training.sft_config.SFTConfig` (re-exported here). Keys follow the
paper's LlamaFactory configs where they apply (``model_name_or_path``, ``dataset``/``train_file``,
``template``, ``block_length``, ``cutoff_len``, ``truncate_mode``, ``neat_packing``, ``learning_rate``, ...).
LlamaFactory keys that have no meaning here (``stage``, ``finetuning_type``, ...) are accepted and listed in
a warning; any other unknown key is an error that names the closest valid key. A YAML in the paper's WeDLM
format is translated by :mod:`textwm.training.paper_keys`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from textwm import config
from textwm.config import ConfigError
from textwm.data.jsonl import atomic_write
from textwm.training.paper_keys import read_paper_config
from textwm.training.sft_config import (
    IGNORED_LLAMAFACTORY_KEYS,
    LOSS_IMPLS,
    OBJECTIVES,
    TRUNCATE_MODES,
    WEDLM_LOSS_NORMALISATIONS,
    WEDLM_LOSS_WEIGHTINGS,
    SFTConfig,
)

__all__ = ["IGNORED_LLAMAFACTORY_KEYS", "LOSS_IMPLS", "OBJECTIVES", "TRUNCATE_MODES", "WEDLM_LOSS_NORMALISATIONS",
           "WEDLM_LOSS_WEIGHTINGS", "ConfigError", "SFTConfig", "load_config", "save_config"]


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> SFTConfig:
    """Read a YAML config and apply ``key=value`` overrides (YAML-typed, e.g. ``max_steps=10``).

    A YAML in the paper's WeDLM format (Tencent/WeDLM finetune keys: ``model_path``, ``train_data``,
    ...) is translated first (:mod:`textwm.training.paper_keys`); the overrides then use our keys.

    Raises:
        ConfigError: unknown key (with the closest valid one), bad value, or unreadable YAML.
    """
    paper = read_paper_config(path) if path is not None else None
    if paper is None:
        return config.load(SFTConfig, path=path, overrides=overrides or (), ignored_keys=IGNORED_LLAMAFACTORY_KEYS)
    cfg = config.load(SFTConfig, overrides=[*paper.overrides(), *(overrides or ())],
                      ignored_keys=IGNORED_LLAMAFACTORY_KEYS)
    return paper.finish(cfg)


def save_config(cfg: SFTConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically) next to the outputs it produced; :func:`load_config` reads
    it back."""

    with atomic_write(path) as f:
        f.write("# resolved textwm SFT config (every key, defaults included)\n")
        yaml.safe_dump(config.config_dict(cfg), f, sort_keys=False)
