"""Loading, saving and converting world-model checkpoints.

Every family (:mod:`textwm.models.families`: ``ar``, ``sdar``, ``wedlm``, and any registered later) shares one
interface:

* ``ar``: any Hugging Face causal LM (Qwen3, Qwen2, Llama, ...), decoded left to right;
* ``sdar``: a block-diffusion model. Qwen3-based ones carry ``model_type: "sdar"`` and Qwen3-MoE
  ones ``"sdar_moe"`` (the SDAR release formats, see :mod:`textwm.models.sdar`); other
  architectures keep their model type and add ``"diffusion": "sdar"``. All add ``block_size`` and
  ``mask_token_id`` to ``config.json`` (hub SDAR configs lack them: :mod:`textwm.models.families.sdar`).
* ``wedlm``: a causal LM trained to recover masks under causal attention (WeDLM). Tencent's
  checkpoints carry ``model_type: "wedlm"`` (:mod:`textwm.models.wedlm`); ones converted here keep
  their architecture and model type and add ``"diffusion": "wedlm"``, ``mask_token_id`` and
  ``block_size`` (the training block of the masking ratios).

The family, block size, mask token and stop ids are read from the checkpoint (never hard-coded)
into a :class:`ModelSpec`; decoders and trainers take their settings from it and their pieces from the
family. No checkpoint needs ``trust_remote_code``: importing :mod:`textwm.models.sdar` and
:mod:`textwm.models.wedlm` (done here before loading) registers the ``sdar``, ``sdar_moe`` and ``wedlm``
model types with transformers.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.models import hub, pretrained
from textwm.models.families import DEFAULT_FAMILY, DIFFUSION_FIELD, family_names, family_of, get_family
from textwm.models.hub import CheckpointError

log = logging.getLogger(__name__)

MASK_TOKEN = "<|MASK|>"


@dataclass(frozen=True)
class ModelSpec:
    """What a decoder or trainer needs to know about a checkpoint, read from its files."""

    path: str
    family: str
    model_type: str
    block_size: int | None
    mask_token_id: int | None
    #: Generation stops at any of these ids (generation_config.json ``eos_token_id``).
    stop_ids: tuple[int, ...]
    pad_token_id: int | None

    def require_diffusion(self, block_length: int, *, rules: str = "generate") -> None:
        """Check that block-diffusion decoding with ``block_length`` is possible.

        Under ``rules="lmdeploy"`` a block length that does not divide the model's block size is
        allowed with a warning: lmdeploy never reads ``block_size`` (the paper served block-4 SDAR
        models with ``--dllm-block-length 8``), and those rules reproduce it.

        Raises:
            CheckpointError: no mask token, or (``generate`` rules) ``block_length`` does not divide
            the model's block size.
        """
        if self.mask_token_id is None:
            raise CheckpointError(
                f"{self.path}: config.json has no mask_token_id, which block-diffusion decoding needs. Add it "
                f"(the id of {MASK_TOKEN} in this tokenizer) or convert the model with "
                f"`python sdar/convert_checkpoint.py --model-path {self.path} --output-dir <new dir>`")
        if block_length < 1:
            raise CheckpointError(f"block length must be >= 1, got {block_length}")
        if self.block_size is not None and self.block_size % block_length != 0:
            if rules == "lmdeploy":
                _warn_block_length(self.path, self.block_size, block_length)
                return
            raise CheckpointError(
                f"{self.path}: block length {block_length} does not divide the model's block_size "
                f"{self.block_size}; use a divisor of {self.block_size} (e.g. {self.block_size}), or "
                f"sdar_rules=lmdeploy (the --dllm-* flags), which decodes any block length as lmdeploy does")


@functools.lru_cache(maxsize=64)
def _warn_block_length(path: str, block_size: int, block_length: int) -> None:
    """Once per (checkpoint, block size, block length)."""
    log.warning("%s: block length %d does not divide the model's block_size %d; lmdeploy decodes so anyway "
                "(it never reads block_size), and so does sdar_rules=lmdeploy", path, block_length, block_size)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    spec: ModelSpec


def _local_path(path: str | os.PathLike) -> Path:
    """A local checkpoint folder for ``path``: a folder, a named pretrained start (made in the cache on first
    use, :mod:`textwm.models.pretrained`), or a hub id (downloaded if the Hub is reachable)."""

    p = Path(path)
    if not p.exists() and pretrained.is_start_name(path):
        return pretrained.pretrained_path(str(path))
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise CheckpointError(f"{p}: not a checkpoint folder (no config.json)")
        return p
    if p.exists():
        raise CheckpointError(f"{p}: expected a checkpoint folder, found a file")
    if str(path).count("/") != 1 or str(path).startswith((".", "/")):
        raise CheckpointError(f"{path}: no such checkpoint folder")
    # heavy (~0.3 s) and only for hub ids
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path)))
    except Exception as exc:
        raise CheckpointError(
            f"{path}: not a local folder, and downloading it from the Hugging Face Hub failed "
            f"({type(exc).__name__}: {str(exc)[:200]}). Offline? Download it elsewhere "
            f"(`huggingface-cli download {path} --local-dir DIR`) and pass DIR.") from exc


def _block_size(local: Path, config: dict[str, Any], family: str, name: str,
                level: int = logging.WARNING) -> int | None:
    """The checkpoint's diffusion block size: ``config.json``'s, else the family's fill-in (None for AR and for
    WeDLM hub configs). A filled-in value is announced at ``level``; ``name``: the path or hub id given."""
    if config.get("block_size") is not None:
        return int(config["block_size"])
    return get_family(family).default_block_size(local, config, name, level)


def _mask_token_id(local: Path, config: dict[str, Any], family: str, level: int = logging.WARNING) -> int | None:
    """The checkpoint's mask id: ``config.json``'s, else the family's fill-in (None for AR checkpoints and unknown
    SDAR ones). A filled-in value is announced at ``level``."""
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    return get_family(family).default_mask_token_id(local, config, level)


def _stop_ids(local: Path, config: dict[str, Any], family: str) -> list[int]:
    """Stop ids: ``generation_config.json`` ``eos_token_id`` (else ``config.json``'s), and the tokenizer's eos token
    where the family stops at it (WeDLM)."""
    gen = local / "generation_config.json"
    stops = hub.as_ids(hub.read_json(gen).get("eos_token_id")) if gen.is_file() else []
    stops = stops or hub.as_ids(config.get("eos_token_id"))
    if get_family(family).stops_at_tokenizer_eos and (eos := hub.tokenizer_setting(local, "eos_token")) is not None:
        stops += hub.as_ids(hub.token_id(local, eos))
    return list(dict.fromkeys(stops))


def read_spec(path: str | os.PathLike, *, mask_token_id: int | None = None) -> ModelSpec:
    """Read a checkpoint's family, block size, mask token and stop ids from its JSON files.

    What a hub config leaves out is filled in by the checkpoint's family (each
    value announced with a warning): the SDAR block size and mask id, WeDLM's hard-coded mask id.

    Args:
        path: a local checkpoint folder (or a hub id, downloaded if reachable).
        mask_token_id: override of the checkpoint's mask id (wins over config and rules).
    """
    local = _local_path(path)
    config = hub.read_json(local / "config.json")
    family = family_of(config)
    mask = mask_token_id if mask_token_id is not None else _mask_token_id(local, config, family)
    return ModelSpec(path=str(local), family=family, model_type=str(config.get("model_type", "")),
                     block_size=_block_size(local, config, family, str(path)),
                     mask_token_id=int(mask) if mask is not None else None,
                     stop_ids=tuple(_stop_ids(local, config, family)), pad_token_id=config.get("pad_token_id"))


def apply_spec(model: Any, spec: ModelSpec) -> None:
    """Write the spec's resolved block size and mask id into a loaded diffusion model's config, so
    the in-memory config (and any checkpoint saved from it) says what the hub config left out."""
    if not get_family(spec.family).masked:
        return
    if spec.block_size is not None:
        model.config.block_size = spec.block_size
    if spec.mask_token_id is not None:
        model.config.mask_token_id = spec.mask_token_id


def resolve_device(name: str = "auto"):
    """``auto`` -> CUDA if available, else CPU (announced: CPU runs are slow)."""
    # heavy: loads torch
    import torch

    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    log.warning("no CUDA device: running on the CPU")
    return torch.device("cpu")


def resolve_dtype(name: str, device) -> Any:
    """``auto`` -> bfloat16 on a GPU that supports it, else float32."""
    # heavy: loads torch
    import torch

    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    dtypes = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
              "float32": torch.float32, "fp32": torch.float32}
    if name not in dtypes:
        raise CheckpointError(f"unknown dtype {name!r}; use auto, {', '.join(dtypes)}")
    return dtypes[name]


def load_model(path: str | os.PathLike, *, device: str = "auto", dtype: str = "auto",
               attn_implementation: str = "sdpa", mask_token_id: int | None = None) -> LoadedModel:
    """Load tokenizer, model (eval mode, on ``device``) and :class:`ModelSpec` of a checkpoint."""
    # heavy: loads torch and transformers
    from transformers import AutoModelForCausalLM

    from textwm.models import sdar, wedlm  # noqa: F401  (register the sdar, sdar_moe and wedlm model types)

    loaded = load_tokenizer(path, mask_token_id=mask_token_id)
    dev = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(loaded.spec.path, dtype=resolve_dtype(dtype, dev),
                                                 trust_remote_code=False, attn_implementation=attn_implementation)
    model.to(dev).eval()
    apply_spec(model, loaded.spec)
    return LoadedModel(model=model, tokenizer=loaded.tokenizer, spec=loaded.spec)


def load_tokenizer(path: str | os.PathLike, *, mask_token_id: int | None = None) -> LoadedModel:
    """A checkpoint's tokenizer and :class:`ModelSpec` without its weights (``model`` is None): what a server
    front end needs when another process decodes. The pad token and stop ids are resolved as
    :func:`load_model` resolves them."""
    # heavy: loads transformers
    from transformers import AutoTokenizer

    spec = read_spec(path, mask_token_id=mask_token_id)
    tokenizer = AutoTokenizer.from_pretrained(spec.path, trust_remote_code=False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    stops = spec.stop_ids or tuple(hub.as_ids(tokenizer.eos_token_id))
    spec = ModelSpec(**{**spec.__dict__, "stop_ids": stops,
                        "pad_token_id": spec.pad_token_id if spec.pad_token_id is not None else tokenizer.pad_token_id})
    return LoadedModel(model=None, tokenizer=tokenizer, spec=spec)


def add_mask_token(model: Any, tokenizer: Any) -> int:
    """Give the tokenizer a mask token (``<|MASK|>`` unless it has one) and the model an embedding
    row for it (new rows = mean of the old ones); returns its id."""
    if tokenizer.mask_token is None:
        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
    mask_id = int(tokenizer.mask_token_id)
    if mask_id >= model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return mask_id


def convert_to_family(model: Any, tokenizer: Any, family: str, block_size: int) -> int | None:
    """Turn a causal LM (in memory) into a checkpoint of ``family``; returns the mask id (None: an unmasked family).

    A model of another family is first made a plain causal LM (:func:`as_autoregressive`). A masked family
    gets a mask token (:func:`add_mask_token`: ``<|MASK|>`` unless the tokenizer has one, new embedding rows
    = mean of the old ones) and ``block_size`` / ``mask_token_id`` in its config; then the model takes the
    family's own classes where it has them for this architecture (SDAR: Qwen3 -> ``SDARForCausalLM``),
    otherwise it keeps its classes and its config says ``"diffusion": family``.
    """
    target = get_family(family)
    if target.masked and block_size < 1:
        raise CheckpointError(f"block_size must be >= 1, got {block_size}")
    if family_of(model.config.to_dict()) not in (target.name, DEFAULT_FAMILY):
        as_autoregressive(model)
    if target.name == DEFAULT_FAMILY:
        return None
    mask_id = add_mask_token(model, tokenizer) if target.masked else None
    classes = target.own_classes(model.config.model_type)
    model.config = family_config(model.config, target.name, block_size=block_size, mask_token_id=mask_id)
    if classes is not None:   # the family's own classes: the same modules and weights, another class
        model.config.vocab_size = model.get_input_embeddings().weight.shape[0]
        model.__class__ = classes[1]
    return mask_id


def family_config(config: Any, family: str, *, block_size: int, mask_token_id: int | None) -> Any:
    """A plain causal LM's config (``Qwen3Config``, ``LlamaConfig``, ...) as a config of ``family``, the way
    :func:`convert_to_family` makes one (the tiny-model factory builds its configs so)."""
    target = get_family(family)
    fields = {"block_size": block_size, "mask_token_id": mask_token_id} if target.masked else {}
    classes = target.own_classes(config.model_type)
    if classes is not None:
        return config_as(config, classes[0], **fields)
    if target.name != DEFAULT_FAMILY:
        mark_config(config, target.name, fields)
    return config


def mark_config(config: Any, family: str, fields: dict[str, Any]) -> None:
    """Write ``fields`` and the family marker (``"diffusion": family``) into ``config``."""
    for name, value in fields.items():
        setattr(config, name, value)
    setattr(config, DIFFUSION_FIELD, family)


def convert_to_wedlm(model: Any, tokenizer: Any, block_size: int) -> int:
    """Mark a causal LM (in memory) as a WeDLM checkpoint; returns the mask id.

    The architecture and model type stay (WeDLM decodes with ordinary causal attention): only a
    mask token and the ``diffusion``/``mask_token_id``/``block_size`` config fields are added.
    """
    return convert_to_family(model, tokenizer, "wedlm", block_size)


def convert_to_block_diffusion(model: Any, tokenizer: Any, block_size: int) -> int:
    """Turn a causal LM (in memory) into an SDAR block-diffusion checkpoint; returns the mask id.

    Adds ``<|MASK|>`` to the tokenizer if it has no mask token, grows the embeddings if the id
    falls outside them (new rows = mean of the old ones), and writes the SDAR fields into the
    config. A Qwen3 model becomes :class:`~textwm.models.sdar.SDARForCausalLM` (``model_type:
    "sdar"``, the format SDAR tools read), a Qwen3-MoE one ``SDARMoeForCausalLM`` (``"sdar_moe"``);
    other architectures keep their model type and get ``"diffusion": "sdar"``.
    """
    return convert_to_family(model, tokenizer, "sdar", block_size)


def config_as(config: Any, config_cls: type, *, drop: tuple[str, ...] = (), **fields: Any) -> Any:
    """``config`` as an instance of ``config_cls`` (its saved model type), with ``fields`` set: the same
    architecture, only the class changes. ``drop``: config keys to leave out."""
    skip = ("model_type", "architectures", "transformers_version", *drop)
    out = config_cls(**{k: v for k, v in config.to_dict().items() if k not in skip})
    for name, value in fields.items():
        setattr(out, name, value)
    return out


def as_autoregressive(model: Any) -> None:
    """Drop the family's format or marker so a checkpoint trained with the AR objective saves as an AR model:
    a model type a family owns becomes its plain architecture (SDAR -> Qwen3, hub WeDLM -> Qwen3 / Qwen2.5),
    a marked config loses the marker, ``block_size`` and ``mask_token_id``."""
    model_type = getattr(model.config, "model_type", None)
    owner = next((f for f in map(get_family, family_names()) if model_type in f.model_types), None)
    if owner is not None and owner.plain_classes is not None:
        config_cls, model_cls = owner.plain_classes(model.config)
        model.config = config_as(model.config, config_cls, drop=("block_size", "mask_token_id", "qk_norm"))
        model.__class__ = model_cls
    elif hasattr(model.config, DIFFUSION_FIELD):
        delattr(model.config, DIFFUSION_FIELD)
        for name in ("block_size", "mask_token_id"):
            if hasattr(model.config, name):
                delattr(model.config, name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, block_size: int,
                       family: str = "sdar") -> Path:
    """Convert an AR checkpoint on disk: load ``src`` (a folder, a hub id or a pretrained start name), turn it into
    a checkpoint of the masked ``family`` (:func:`convert_to_family`: SDAR, WeDLM), save to ``dst``."""
    # heavy: loads torch and transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from textwm.models import sdar, wedlm  # noqa: F401  (register the sdar, sdar_moe and wedlm model types)

    masked = [name for name in family_names() if get_family(name).masked]
    if family not in masked:
        raise CheckpointError(f"conversion family must be one of {', '.join(masked)}, got {family!r}")
    local = _local_path(src)
    if Path(dst).resolve() == local.resolve():
        raise CheckpointError(f"{dst}: write the converted checkpoint to a new folder")
    tokenizer = AutoTokenizer.from_pretrained(local)
    model = AutoModelForCausalLM.from_pretrained(local, dtype="auto")
    convert_to_family(model, tokenizer, family, block_size)
    out = Path(dst)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
