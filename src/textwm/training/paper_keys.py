"""The paper's training configs, read by the one trainer (patronus-ai/mdlm_world_modeling).

Two formats of the paper's repository:

* ``wedlm/configs/example.yaml``: the keys of Tencent/WeDLM's ``finetune/train.py``, which the
  paper's ``wedlm/train.sh`` runs (``finetune/src/config.py`` ``WeDLMTrainingConfig``).
  :func:`read_paper_config` recognises it by keys only it has (``model_path``, ``train_data``,
  ``block_size``, ...) and translates every key (:data:`PAPER_WEDLM_KEYS`): onto an
  :class:`~textwm.training.config.SFTConfig` field; accepted with a one-line notice where it has no
  meaning here; or refused (a :class:`ConfigError` naming the key, the value and what to use instead)
  where it asks for what this trainer does not implement. A key left out takes Tencent/WeDLM's
  default (:data:`UPSTREAM_DEFAULTS`), as it would there. Our own keys may be mixed in
  (``gradient_checkpointing: true``); a paper key and the key of ours it maps to may not both be set.
* ``sdar/configs/sft_example.yaml`` (LlamaFactory's keys, read by :mod:`textwm.training.config`
  directly): its ``deepspeed: examples/deepspeed/ds_z3_config.json`` is relative to a LlamaFactory
  checkout; :func:`resolve_deepspeed` maps LlamaFactory's bundled names onto our JSONs in
  ``sdar/configs/``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textwm.config import ConfigError, coerce, leaves, read_yaml
from textwm.training.deepspeed_paths import (  # noqa: F401 (re-exported)
    LLAMAFACTORY_DEEPSPEED,
    our_deepspeed_dir,
    resolve_deepspeed,
)
from textwm.training.sft_config import IGNORED_LLAMAFACTORY_KEYS, WEDLM_LOSS_WEIGHTINGS, SFTConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PaperKey:
    """One key of the paper's WeDLM YAML: its type upstream, the field of ours it sets, what it becomes here."""

    #: The value's type (None: the type of ``ours``).
    type: Any
    #: Our field it sets as is ("": a rule of :func:`translate` decides).
    ours: str
    #: What it becomes here, one line (the table in wedlm/README.md).
    meaning: str


def _same(meaning: str = "the same key") -> PaperKey:
    return PaperKey(None, "", meaning)


_OPT_STR = str | None

#: Every key of Tencent/WeDLM's ``WeDLMTrainingConfig`` (``finetune/src/config.py``) and what it becomes here.
PAPER_WEDLM_KEYS: dict[str, PaperKey] = {
    "model_path": PaperKey(None, "model_name_or_path", "model_name_or_path"),
    "trust_remote_code": PaperKey(bool, "", "notice: no remote code runs (textwm registers the WeDLM classes)"),
    "train_data": PaperKey(None, "train_file", "train_file (JSONL of message arrays, or of {messages} rows)"),
    "max_seq_length": PaperKey(None, "cutoff_len", "cutoff_len, with neat_packing: true (Tencent/WeDLM always "
                                                   "packs); longer samples are dropped and counted, not cut"),
    "block_size": PaperKey(None, "block_length", "block_length (the block of each masking ratio)"),
    "mask_per_block": PaperKey(bool, "", "true: what we do (a ratio per block); false: refused"),
    "loss_weighting_scheme": PaperKey(None, "wedlm_loss_weighting", "wedlm_loss_weighting (weighted or uniform)"),
    "mask_eps": PaperKey(float, "", "1e-8: what we use; another value: refused"),
    "num_learnable_im_end": PaperKey(int, "", "0 or 1: what we do (one end-of-turn); more: refused"),
    "enable_ar_loss": PaperKey(bool, "", "false: wedlm_ar_loss_weight 0"),
    "ar_loss_weight": PaperKey(float, "", "wedlm_ar_loss_weight"),
    "attention_backend": PaperKey(str, "", "attn_implementation: dense -> sdpa; magi -> auto (flex attention on "
                                           "CUDA), with a notice"),
    "output_dir": _same(), "num_train_epochs": _same(), "per_device_train_batch_size": _same(),
    "gradient_accumulation_steps": _same(), "learning_rate": _same(), "lr_scheduler_type": _same(),
    "warmup_ratio": _same(), "weight_decay": _same(), "max_grad_norm": _same(),
    "rebuild_cache": PaperKey(bool, "", "notice: no data cache here (tokenised and packed at every start)"),
    "use_deepspeed": PaperKey(bool, "", "true: a DeepSpeed JSON generated from the deepspeed_* keys, written to "
                                        "<output_dir>/deepspeed_config.json when training starts"),
    "deepspeed_zero_stage": PaperKey(int, "", "that JSON's ZeRO stage"),
    "deepspeed_offload_optimizer": PaperKey(bool, "", "that JSON's offload_optimizer"),
    "deepspeed_offload_param": PaperKey(bool, "", "that JSON's offload_param (ZeRO-3; ignored below, with a notice)"),
    "deepspeed_offload_nvme": PaperKey(bool, "", "that JSON's offload device nvme"),
    "deepspeed_nvme_path": PaperKey(str, "", "that JSON's nvme_path"),
    "deepspeed_pin_memory": PaperKey(bool, "", "that JSON's pin_memory"),
    "deepspeed_overlap_comm": PaperKey(bool, "", "that JSON's overlap_comm"),
    "deepspeed_contiguous_gradients": PaperKey(bool, "", "that JSON's contiguous_gradients"),
    "deepspeed_reduce_bucket_size": PaperKey(int, "", "that JSON's reduce/allgather bucket size"),
    "deepspeed_stage3_prefetch_bucket_size": PaperKey(int, "", "that JSON's stage3_prefetch_bucket_size"),
    "deepspeed_stage3_param_persistence_threshold": PaperKey(int, "", "that JSON's "
                                                                      "stage3_param_persistence_threshold"),
    "deepspeed_stage3_max_live_parameters": PaperKey(int, "", "that JSON's stage3_max_live_parameters"),
    "deepspeed_stage3_max_reuse_distance": PaperKey(int, "", "that JSON's stage3_max_reuse_distance"),
    "deepspeed_config_file": PaperKey(_OPT_STR, "", "with use_deepspeed: deepspeed (the file must exist)"),
    "logging_steps": _same(), "save_steps": _same(), "save_total_limit": _same(), "bf16": _same(),
    "seed": _same(),
    "use_wandb": PaperKey(bool, "", "report_to: wandb (true) or none"),
    "wandb_project": PaperKey(_OPT_STR, "", "wandb_project (WANDB_PROJECT; 'wedlm-sft' when unset, as there)"),
    "wandb_team": PaperKey(_OPT_STR, "", "wandb_entity (WANDB_ENTITY)"),
    "wandb_group": PaperKey(_OPT_STR, "", "wandb_group (WANDB_RUN_GROUP)"),
    "wandb_host": PaperKey(_OPT_STR, "", "refused: set WANDB_BASE_URL in the environment"),
    "wandb_key": PaperKey(_OPT_STR, "", "refused: set WANDB_API_KEY in the environment (never in a YAML)"),
}

#: Tencent/WeDLM's defaults (``WeDLMTrainingConfig``): what a key left out of a paper YAML means.
UPSTREAM_DEFAULTS: dict[str, Any] = {
    "model_path": "tencent/WeDLM-8B-Instruct", "trust_remote_code": True, "train_data": "data/train.jsonl",
    "max_seq_length": 2048, "block_size": 32, "mask_per_block": True, "loss_weighting_scheme": "weighted",
    "mask_eps": 1e-8, "num_learnable_im_end": 8, "enable_ar_loss": True, "ar_loss_weight": 1.0,
    "attention_backend": "magi", "output_dir": "outputs", "num_train_epochs": 3, "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 8, "learning_rate": 3e-6, "lr_scheduler_type": "cosine", "warmup_ratio": 0.1,
    "weight_decay": 0.01, "max_grad_norm": 1.0, "rebuild_cache": False, "use_deepspeed": False,
    "deepspeed_zero_stage": 2, "deepspeed_offload_optimizer": False, "deepspeed_offload_param": False,
    "deepspeed_offload_nvme": False, "deepspeed_nvme_path": "/tmp/deepspeed_offload", "deepspeed_pin_memory": True,
    "deepspeed_overlap_comm": True, "deepspeed_contiguous_gradients": True,
    "deepspeed_reduce_bucket_size": 50_000_000, "deepspeed_stage3_prefetch_bucket_size": 50_000_000,
    "deepspeed_stage3_param_persistence_threshold": 100_000,
    "deepspeed_stage3_max_live_parameters": 1_000_000_000, "deepspeed_stage3_max_reuse_distance": 1_000_000_000,
    "deepspeed_config_file": None, "logging_steps": 10, "save_steps": 500, "save_total_limit": 3, "bf16": True,
    "seed": 42, "use_wandb": False, "wandb_project": None, "wandb_team": None, "wandb_group": None,
    "wandb_host": None, "wandb_key": None,
}

#: Where Tencent/WeDLM's ``train.py`` writes its generated DeepSpeed config, and where ours goes.
DEEPSPEED_FILE = "deepspeed_config.json"
#: The MLM weight epsilon of our WeDLM objective (``textwm.diffusion.wedlm.UPSTREAM_WEIGHT_EPS``).
WEDLM_MASK_EPS = 1e-8
#: Folder of Tencent/WeDLM's final model under ``output_dir`` (``trainer.py`` ``_save_checkpoint(final=True)``).
FINAL_DIR = "final"

_FIELDS = {leaf.key: leaf for leaf in leaves(SFTConfig)}
#: Keys that only the paper's WeDLM format has: any of them marks a YAML as that format.
MARKERS = frozenset(k for k in PAPER_WEDLM_KEYS if k not in _FIELDS and k not in IGNORED_LLAMAFACTORY_KEYS)


def is_paper_wedlm(data: Mapping[str, Any]) -> bool:
    """True when a YAML mapping is in the paper's WeDLM format (has a key only that format has)."""
    return any(str(k).replace("-", "_") in MARKERS for k in data)


@dataclass
class PaperConfig:
    """A paper WeDLM YAML translated: our keys with typed values, and the DeepSpeed config to generate."""

    source: str
    values: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    #: DeepSpeed config built from the ``deepspeed_*`` keys (None: no DeepSpeed, or a file was named).
    deepspeed: dict[str, Any] | None = None

    def overrides(self) -> list[str]:
        """The values as ``key=value`` overrides (JSON, which YAML reads back as the same value), to go before
        the command line's own so that those win."""
        return [f"{key}={json.dumps(value)}" for key, value in self.values.items()]

    def finish(self, cfg: SFTConfig) -> SFTConfig:
        """``cfg`` (built from :meth:`overrides` and the command line) with the generated DeepSpeed config,
        to be written into the final ``output_dir`` by the trainer; an explicit ``deepspeed=`` wins."""
        if self.deepspeed is None:
            return cfg
        if cfg.deepspeed:
            log.warning("%s: deepspeed=%s is set, so the DeepSpeed config of use_deepspeed is not generated",
                        self.source, cfg.deepspeed)
            return cfg
        return dataclasses.replace(cfg, deepspeed=str(Path(cfg.output_dir) / DEEPSPEED_FILE),
                                   _generated_deepspeed=self.deepspeed)


def read_paper_config(path: str | os.PathLike) -> PaperConfig | None:
    """The YAML at ``path`` translated when it is in the paper's WeDLM format; None when it is in ours."""
    data = read_yaml(path)
    return translate(data, str(path)) if is_paper_wedlm(data) else None


def expand_paper_argv(argv: Sequence[str]) -> tuple[list[str], PaperConfig | None]:
    """A command line whose ``--config`` names a paper WeDLM YAML, with that option replaced by the YAML's
    translation as ``key=value`` overrides (first, so the command line's own overrides and flags win)."""
    argv = list(argv)
    if "-h" in argv or "--help" in argv:
        return argv, None
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            path, span = argv[i + 1], 2
        elif token.startswith("--config="):
            path, span = token.partition("=")[2], 1
        else:
            continue
        paper = read_paper_config(path)
        if paper is None:
            return argv, None
        return [*paper.overrides(), *argv[:i], *argv[i + span:]], paper
    return argv, None


# --- the translation -----------------------------------------------------------------------------------


def _refuse(source: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{key}: {value!r} {why}", source=source)


def _typed(given: Mapping[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a paper YAML into (paper keys, our keys, LlamaFactory keys we ignore), values typed; unknown keys fail."""
    paper, ours, ignored = {}, {}, {}
    for key, value in given.items():
        if key in PAPER_WEDLM_KEYS:
            spec = PAPER_WEDLM_KEYS[key]
            tp = spec.type or _FIELDS[spec.ours or key].type
            paper[key] = coerce(value, tp, key=key, source=source)
        elif key in _FIELDS:
            ours[key] = coerce(value, _FIELDS[key].type, key=key, source=source)
        elif key in IGNORED_LLAMAFACTORY_KEYS:
            ignored[key] = value
        else:
            close = difflib.get_close_matches(key, [*PAPER_WEDLM_KEYS, *_FIELDS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r}{hint}; this YAML is read in the paper's WeDLM format "
                              f"(Tencent/WeDLM finetune keys, see wedlm/README.md), where our keys may be mixed in",
                              source=source)
    return paper, ours, ignored


def translate(data: Mapping[str, Any], source: str) -> PaperConfig:
    """Our config values for a paper WeDLM YAML mapping (see the module docstring); notices logged.

    Raises:
        ConfigError: an unknown key, a bad value, a paper key together with the key of ours it maps to, or a
            value this trainer does not implement (the message says what to use instead).
    """
    given = {str(k).replace("-", "_"): v for k, v in data.items()}
    paper, ours, ignored = _typed(given, source)
    out = PaperConfig(source=source, values=dict(ours))
    if ours.get("objective", "wedlm") != "wedlm":
        raise _refuse(source, "objective", ours["objective"], "with the paper's WeDLM keys: they train objective "
                      "wedlm; write the config with our keys (sdar/configs/*.yaml) for another objective")
    out.values["objective"] = "wedlm"
    out.values.setdefault("final_dir", FINAL_DIR)
    defaults = _set_direct(paper, ours, out)
    full = {**UPSTREAM_DEFAULTS, **paper}
    _wedlm_rules(full, paper, ours, out)
    _attention(full, paper, ours, out)
    _deepspeed(full, paper, ours, out)
    _wandb(full, paper, ours, out)
    out.values.update(ignored)  # the trainer's loader warns about them, as for any LlamaFactory config
    log.warning("%s: read in the paper's WeDLM format (Tencent/WeDLM finetune keys; the mapping is in "
                "wedlm/README.md)", source)
    if defaults:
        log.warning("%s: keys not set take Tencent/WeDLM's defaults: %s", source,
                    ", ".join(f"{k} {v!r}" for k, v in defaults.items()))
    for notice in out.notices:
        log.warning("%s: %s", source, notice)
    return out


def _conflict(source: str, key: str, target: str) -> ConfigError:
    return ConfigError(f"sets both {key} (the paper's key) and {target} (ours, which it maps to); keep one",
                       source=source)


def _set_direct(paper: dict[str, Any], ours: dict[str, Any], out: PaperConfig) -> dict[str, Any]:
    """Keys that set one field of ours as is. Returns the upstream defaults used for keys left out (only
    those whose default differs from ours, and whose field of ours is not set either)."""
    used = {}
    for key, spec in PAPER_WEDLM_KEYS.items():
        if spec.type is not None:
            continue  # a rule decides
        target = spec.ours or key
        if key in paper:
            if target != key and target in ours:
                raise _conflict(out.source, key, target)
            out.values[target] = paper[key]
        elif target not in ours and not (key == "train_data" and "dataset" in ours):
            default = coerce(UPSTREAM_DEFAULTS[key], _FIELDS[target].type, key=key, source=None)
            if default != _FIELDS[target].default:
                out.values[target], used[key] = default, UPSTREAM_DEFAULTS[key]
    out.values.setdefault("neat_packing", True)  # Tencent/WeDLM always packs (data.py WeDLMPackedDataset)
    if "truncate_mode" not in ours:
        out.notices.append(f"max_seq_length {out.values.get('cutoff_len', _FIELDS['cutoff_len'].default)}: samples "
                           "longer than it are dropped and counted (truncate_mode: drop; Tencent/WeDLM cuts their "
                           "end); add truncate_mode: cut to keep them with the start of their prompt cut")
    return used


def _wedlm_rules(full: dict[str, Any], paper: dict[str, Any], ours: dict[str, Any], out: PaperConfig) -> None:
    """The WeDLM objective's keys (Tencent/WeDLM ``finetune/src/masking.py``, ``loss.py``, ``data.py``)."""
    src = out.source
    if full["loss_weighting_scheme"] not in WEDLM_LOSS_WEIGHTINGS:
        raise _refuse(src, "loss_weighting_scheme", full["loss_weighting_scheme"],
                      f"is not one of {', '.join(WEDLM_LOSS_WEIGHTINGS)} (Tencent/WeDLM's two)")
    if not full["mask_per_block"]:
        raise _refuse(src, "mask_per_block", False, "(one masking ratio per sample) is not implemented: our WeDLM "
                      "objective draws a ratio per block (textwm.diffusion.wedlm.sample_block_noise), the paper's "
                      "design; set mask_per_block: true or remove the key")
    if not math.isclose(full["mask_eps"], WEDLM_MASK_EPS, rel_tol=1e-6):
        raise _refuse(src, "mask_eps", full["mask_eps"], f"is not implemented: our WeDLM objective uses "
                      f"Tencent/WeDLM's default {WEDLM_MASK_EPS:g} (its MLM weights 1 / (gamma + eps)); set "
                      "mask_eps: 1.0e-8 or remove the key")
    extra = full["num_learnable_im_end"]
    if extra > 1:
        unset = "is not set, and Tencent/WeDLM's default is 8, which " if "num_learnable_im_end" not in paper else ""
        raise _refuse(src, "num_learnable_im_end", extra, f"{unset}appends {extra - 1} extra trained <|im_end|> "
                      "tokens to every sample, which this trainer does not implement (each answer ends with one "
                      "end-of-turn); set num_learnable_im_end: 0")
    if extra < 0:
        raise _refuse(src, "num_learnable_im_end", extra, "must be >= 0; set 0")
    weight = full["ar_loss_weight"]
    if weight < 0:
        raise _refuse(src, "ar_loss_weight", weight, "must be >= 0 (0 or enable_ar_loss: false turns the AR loss "
                      "off)")
    if {"enable_ar_loss", "ar_loss_weight"} & set(paper) and "wedlm_ar_loss_weight" in ours:
        raise _conflict(src, "enable_ar_loss/ar_loss_weight", "wedlm_ar_loss_weight")
    if "wedlm_ar_loss_weight" not in ours:
        out.values["wedlm_ar_loss_weight"] = weight if full["enable_ar_loss"] else 0.0
    if "trust_remote_code" in paper:
        out.notices.append("trust_remote_code: accepted; no remote code runs here (textwm registers the WeDLM "
                           "and SDAR model classes)")
    if "rebuild_cache" in paper:
        value = str(paper["rebuild_cache"]).lower()
        out.notices.append(f"rebuild_cache: {value}: accepted; there is no packed-data cache "
                           "here (the data is tokenised and packed at every start)")


def _attention(full: dict[str, Any], paper: dict[str, Any], ours: dict[str, Any], out: PaperConfig) -> None:
    """``attention_backend`` (Tencent/WeDLM ``finetune/src/attention.py``): dense is SDPA with a 2D mask;
    magi falls back to dense there when MagiAttention is missing, i.e. the best one available, our auto."""
    backend = full["attention_backend"]
    if backend not in ("dense", "magi"):
        raise _refuse(out.source, "attention_backend", backend, "is not one of dense, magi")
    if "attention_backend" in paper and "attn_implementation" in ours:
        raise _conflict(out.source, "attention_backend", "attn_implementation")
    if "attn_implementation" in ours:
        return
    ours_name = "sdpa" if backend == "dense" else "auto"
    out.values["attn_implementation"] = ours_name
    if "attention_backend" in paper:
        what = ("PyTorch SDPA with a dense mask, as dense there" if backend == "dense" else
                "flex attention on CUDA, SDPA on CPU; no MagiAttention install is needed")
        out.notices.append(f"attention_backend: {backend} -> attn_implementation: {ours_name} ({what})")


def _deepspeed(full: dict[str, Any], paper: dict[str, Any], ours: dict[str, Any], out: PaperConfig) -> None:
    """``use_deepspeed`` and the ``deepspeed_*`` keys (Tencent/WeDLM ``config.py`` ``get_deepspeed_config``)."""
    ds_keys = sorted(k for k in paper if k.startswith("deepspeed_"))
    if not full["use_deepspeed"]:
        if ds_keys:
            out.notices.append(f"use_deepspeed is false: {', '.join(ds_keys)} unused (as there)")
        return
    if "deepspeed" in ours:
        raise _conflict(out.source, "use_deepspeed", "deepspeed")
    if full["deepspeed_config_file"]:
        out.values["deepspeed"] = full["deepspeed_config_file"]  # SFTConfig checks that it exists
        return
    out.deepspeed = generated_deepspeed(full, out.notices.append, out.source)
    if not out.values.get("bf16", True):
        out.notices.append("bf16 false with use_deepspeed: Tencent/WeDLM's generated DeepSpeed config turns fp16 "
                           "on then; here training is fp32 (bf16 'auto', i.e. off)")


def generated_deepspeed(p: Mapping[str, Any], notice: Callable[[str], Any], source: str) -> dict[str, Any]:
    """The DeepSpeed config of Tencent/WeDLM's ``get_deepspeed_config`` for the paper keys ``p`` (all set).

    Batch sizes, accumulation, clipping and precision are ``"auto"`` (the HF Trainer fills them from our
    config, with the values upstream writes in); the ZeRO section follows upstream's rule: stage, overlap,
    contiguous gradients, bucket sizes, optimizer offload (cpu or nvme), and at stage 3 its bucket/live/reuse
    limits, 16-bit weights gathered on save and parameter offload. One change: an nvme parameter offload gets
    ``nvme_path`` too (upstream leaves it out; DeepSpeed needs it).
    """
    stage = p["deepspeed_zero_stage"]
    if stage not in (0, 1, 2, 3):
        raise _refuse(source, "deepspeed_zero_stage", stage, "is not a ZeRO stage (0, 1, 2 or 3)")

    def offload() -> dict[str, Any]:
        where: dict[str, Any] = {"device": "nvme" if p["deepspeed_offload_nvme"] else "cpu",
                                 "pin_memory": p["deepspeed_pin_memory"]}
        if p["deepspeed_offload_nvme"]:
            where["nvme_path"] = p["deepspeed_nvme_path"]
        return where

    zero: dict[str, Any] = {"stage": stage, "overlap_comm": p["deepspeed_overlap_comm"],
                            "contiguous_gradients": p["deepspeed_contiguous_gradients"],
                            "reduce_bucket_size": p["deepspeed_reduce_bucket_size"],
                            "allgather_bucket_size": p["deepspeed_reduce_bucket_size"]}
    if p["deepspeed_offload_optimizer"]:
        if stage == 0:
            raise _refuse(source, "deepspeed_offload_optimizer", True, "needs ZeRO stage 1 or more (DeepSpeed "
                          "offloads optimizer state only under ZeRO); set deepspeed_zero_stage: 2")
        zero["offload_optimizer"] = offload()
    if stage == 3:
        zero.update({key: p[f"deepspeed_{key}"] for key in (
            "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
            "stage3_max_reuse_distance")})
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        if p["deepspeed_offload_param"]:
            zero["offload_param"] = offload()
    elif p["deepspeed_offload_param"]:
        notice(f"deepspeed_offload_param: true is ignored at ZeRO stage {stage}, as there (DeepSpeed offloads "
               "parameters at stage 3 only)")
    return {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": zero}


def _wandb(full: dict[str, Any], paper: dict[str, Any], ours: dict[str, Any], out: PaperConfig) -> None:
    """``use_wandb`` and the ``wandb_*`` keys (Tencent/WeDLM ``trainer.py`` ``_init_wandb``)."""
    for key, env in (("wandb_host", "WANDB_BASE_URL"), ("wandb_key", "WANDB_API_KEY")):
        if full[key]:
            raise _refuse(out.source, key, "..." if key == "wandb_key" else full[key],
                          f"is not read from a YAML here: set {env} in the environment (or in wedlm/.env, "
                          "which wedlm/train.sh sources) and remove the key")
    if "report_to" in ours:
        if "use_wandb" in paper:
            raise _conflict(out.source, "use_wandb", "report_to")
    else:
        out.values["report_to"] = "wandb" if full["use_wandb"] else "none"
    for key, target in (("wandb_project", "wandb_project"), ("wandb_team", "wandb_entity"),
                        ("wandb_group", "wandb_group")):
        if full[key] and target in ours and key != target:
            raise _conflict(out.source, key, target)
        if full[key]:
            out.values[target] = full[key]
    if full["use_wandb"] and not out.values.get("wandb_project"):
        out.values["wandb_project"] = "wedlm-sft"  # upstream: wandb.init(project=... or "wedlm-sft")
