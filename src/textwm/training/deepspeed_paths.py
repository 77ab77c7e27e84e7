"""The ``deepspeed:`` key of a training config as a file that exists: the paper's LlamaFactory YAML names
LlamaFactory's bundled DeepSpeed configs by a LlamaFactory-relative path, which maps onto ours here."""

from __future__ import annotations

import logging
from pathlib import Path

from textwm.config import ConfigError

log = logging.getLogger(__name__)

#: LlamaFactory's bundled ``examples/deepspeed/*.json`` (the SDAR fork's are the same files) -> ours in
#: ``sdar/configs/``, with the same ZeRO stage and offloads (hiyouga/LLaMA-Factory ``examples/deepspeed``).
LLAMAFACTORY_DEEPSPEED = {
    "ds_z0_config.json": "ds_z0.json",
    "ds_z2_config.json": "ds_z2.json",
    "ds_z2_offload_config.json": "ds_z2_offload.json",
    "ds_z3_config.json": "ds_z3.json",
    "ds_z3_offload_config.json": "ds_z3_offload.json",
}


def repository_root() -> Path:
    """The checkout this package runs from (src/textwm/training/ -> the repository root)."""
    return Path(__file__).resolve().parents[3]


def our_deepspeed_dir() -> Path:
    """``sdar/configs`` of this checkout."""
    return repository_root() / "sdar" / "configs"


def resolve_deepspeed(value: str) -> str:
    """A ``deepspeed:`` value as a file that exists: itself (relative to the working directory, else to the
    repository root: our YAMLs name ``sdar/configs/ds_z3.json``, which from ``sdar/`` is not found as such),
    or our equivalent of a LlamaFactory bundled config named by a LlamaFactory-relative path (e.g.
    ``examples/deepspeed/ds_z3_config.json``), announced.

    Raises:
        ConfigError: naming the key and the path, when it is neither.
    """
    if Path(value).is_file():
        return value
    in_checkout = repository_root() / value
    if not Path(value).is_absolute() and in_checkout.is_file():
        log.info("deepspeed: %s is not under %s: using the checkout's %s", value, Path.cwd(), in_checkout)
        return str(in_checkout)
    name = LLAMAFACTORY_DEEPSPEED.get(Path(value).name)
    if name is None:
        raise ConfigError(f"file {value!r} does not exist (relative to {Path.cwd()}) and is not one of "
                          f"LlamaFactory's bundled configs ({', '.join(LLAMAFACTORY_DEEPSPEED)}); give the path "
                          f"of a DeepSpeed JSON, e.g. sdar/configs/ds_z3.json", key="deepspeed")
    ours = our_deepspeed_dir() / name
    if not ours.is_file():
        raise ConfigError(f"{value!r} is LlamaFactory's {Path(value).name}, whose equivalent here, {ours}, is "
                          "missing from this checkout; give the path of a DeepSpeed JSON", key="deepspeed")
    log.warning("deepspeed: %s is LlamaFactory's bundled %s, not found here: using our %s (same ZeRO stage and "
                "offload)", value, Path(value).name, ours)
    return str(ours)
