"""Loading, saving and converting world-model checkpoints.

Three families share one interface:

* ``ar``: any Hugging Face causal LM (Qwen3, Qwen2, Llama, ...), decoded left to right;
* ``sdar``: a block-diffusion model. Qwen3-based ones carry ``model_type: "sdar"`` (the SDAR
  release format, see :mod:`textwm.models.sdar`); other architectures keep their model type and
  add ``"diffusion": "sdar"``. Both add ``block_size`` and ``mask_token_id`` to ``config.json``.
* ``wedlm``: a causal LM trained to recover masks under causal attention (WeDLM); it keeps its
  architecture and model type and adds ``"diffusion": "wedlm"``, ``mask_token_id`` and
  ``block_size`` (the training block of the masking ratios).

The family, block size, mask token and stop ids are read from the checkpoint (never hard-coded)
into a :class:`ModelSpec`; decoders and trainers take their settings from it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FAMILIES = ("ar", "sdar", "wedlm")
#: config.json marker: "sdar" for a block-diffusion checkpoint whose architecture is not Qwen3,
#: "wedlm" for a WeDLM checkpoint (any architecture).
DIFFUSION_FIELD = "diffusion"
MASK_TOKEN = "<|MASK|>"


class CheckpointError(ValueError):
    """A checkpoint cannot be used as asked (missing fields, wrong family, not found)."""


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

    def require_diffusion(self, block_length: int) -> None:
        """Check that block-diffusion decoding with ``block_length`` is possible.

        Raises:
            CheckpointError: no mask token, or ``block_length`` does not divide the model's block size.
        """
        if self.mask_token_id is None:
            raise CheckpointError(
                f"{self.path}: config.json has no mask_token_id, which block-diffusion decoding needs. Add it "
                f"(the id of {MASK_TOKEN} in this tokenizer) or convert the model with "
                f"`python sdar/convert_checkpoint.py --model-path {self.path} --output-dir <new dir>`")
        if block_length < 1:
            raise CheckpointError(f"block length must be >= 1, got {block_length}")
        if self.block_size is not None and self.block_size % block_length != 0:
            raise CheckpointError(
                f"{self.path}: block length {block_length} does not divide the model's block_size "
                f"{self.block_size}; use a divisor of {self.block_size} (e.g. {self.block_size})")


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    spec: ModelSpec


def _local_path(path: str | os.PathLike) -> Path:
    """A local checkpoint folder for ``path``, downloading a hub id if the Hub is reachable."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise CheckpointError(f"{p}: not a checkpoint folder (no config.json)")
        return p
    if p.exists():
        raise CheckpointError(f"{p}: expected a checkpoint folder, found a file")
    if str(path).count("/") != 1 or str(path).startswith((".", "/")):
        raise CheckpointError(f"{path}: no such checkpoint folder")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path)))
    except Exception as exc:
        raise CheckpointError(
            f"{path}: not a local folder, and downloading it from the Hugging Face Hub failed "
            f"({type(exc).__name__}: {str(exc)[:200]}). Offline? Download it elsewhere "
            f"(`huggingface-cli download {path} --local-dir DIR`) and pass DIR.") from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def read_spec(path: str | os.PathLike, *, mask_token_id: int | None = None) -> ModelSpec:
    """Read a checkpoint's family, block size, mask token and stop ids from its JSON files.

    Args:
        path: a local checkpoint folder (or a hub id, downloaded if reachable).
        mask_token_id: override for checkpoints whose config lacks it (e.g. some hub SDAR configs).
    """
    local = _local_path(path)
    config = _read_json(local / "config.json")
    model_type = str(config.get("model_type", ""))
    is_sdar = model_type == "sdar" or config.get(DIFFUSION_FIELD) == "sdar"
    is_wedlm = config.get(DIFFUSION_FIELD) == "wedlm"
    if model_type == "sdar_moe":
        raise CheckpointError(f"{local}: SDAR MoE checkpoints are not supported yet")
    gen_path = local / "generation_config.json"
    stops = _as_ids(_read_json(gen_path).get("eos_token_id")) if gen_path.exists() else []
    if not stops:
        stops = _as_ids(config.get("eos_token_id"))
    mask = mask_token_id if mask_token_id is not None else config.get("mask_token_id")
    block = config.get("block_size")
    if is_sdar and block is None:
        log.warning("%s: config.json has no block_size; the block length is taken from the caller", local)
    family = "sdar" if is_sdar else "wedlm" if is_wedlm else "ar"
    return ModelSpec(path=str(local), family=family, model_type=model_type,
                     block_size=int(block) if block is not None else None,
                     mask_token_id=int(mask) if mask is not None else None, stop_ids=tuple(dict.fromkeys(stops)),
                     pad_token_id=config.get("pad_token_id"))


def resolve_device(name: str = "auto"):
    """``auto`` -> CUDA if available, else CPU (announced: CPU runs are slow)."""
    import torch

    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    log.warning("no CUDA device: running on the CPU")
    return torch.device("cpu")


def resolve_dtype(name: str, device) -> Any:
    """``auto`` -> bfloat16 on a GPU that supports it, else float32."""
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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import textwm.models.sdar  # noqa: F401  (registers the sdar model type)

    spec = read_spec(path, mask_token_id=mask_token_id)
    dev = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=resolve_dtype(dtype, dev),
                                                 attn_implementation=attn_implementation)
    model.to(dev).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    stops = spec.stop_ids or tuple(_as_ids(tokenizer.eos_token_id))
    spec = ModelSpec(**{**spec.__dict__, "stop_ids": stops,
                        "pad_token_id": spec.pad_token_id if spec.pad_token_id is not None else tokenizer.pad_token_id})
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec)


def add_mask_token(model: Any, tokenizer: Any) -> int:
    """Give the tokenizer a mask token (``<|MASK|>`` unless it has one) and the model an embedding
    row for it (new rows = mean of the old ones); returns its id."""
    if tokenizer.mask_token is None:
        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
    mask_id = int(tokenizer.mask_token_id)
    if mask_id >= model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return mask_id


def convert_to_wedlm(model: Any, tokenizer: Any, block_size: int) -> int:
    """Mark a causal LM (in memory) as a WeDLM checkpoint; returns the mask id.

    The architecture and model type stay (WeDLM decodes with ordinary causal attention): only a
    mask token and the ``diffusion``/``mask_token_id``/``block_size`` config fields are added.
    """
    if block_size < 1:
        raise CheckpointError(f"block_size must be >= 1, got {block_size}")
    if getattr(model.config, "model_type", None) == "sdar":
        as_autoregressive(model)
    mask_id = add_mask_token(model, tokenizer)
    model.config.block_size = block_size
    model.config.mask_token_id = mask_id
    setattr(model.config, DIFFUSION_FIELD, "wedlm")
    return mask_id


def convert_to_block_diffusion(model: Any, tokenizer: Any, block_size: int) -> int:
    """Turn a causal LM (in memory) into an SDAR block-diffusion checkpoint; returns the mask id.

    Adds ``<|MASK|>`` to the tokenizer if it has no mask token, grows the embeddings if the id
    falls outside them (new rows = mean of the old ones), and writes the SDAR fields into the
    config. A Qwen3 model becomes :class:`~textwm.models.sdar.SDARForCausalLM` (``model_type:
    "sdar"``, the format SDAR tools read); other architectures keep their model type and get
    ``"diffusion": "sdar"``.
    """
    from textwm.models.sdar import SDARConfig, SDARForCausalLM

    if block_size < 1:
        raise CheckpointError(f"block_size must be >= 1, got {block_size}")
    if getattr(model.config, DIFFUSION_FIELD, None) == "wedlm":
        as_autoregressive(model)
    mask_id = add_mask_token(model, tokenizer)
    if model.config.model_type in ("qwen3", "sdar"):
        config = SDARConfig(**{k: v for k, v in model.config.to_dict().items()
                               if k not in ("model_type", "architectures", "transformers_version")})
        config.block_size, config.mask_token_id = block_size, mask_id
        config.vocab_size = model.get_input_embeddings().weight.shape[0]
        # Same module tree and weights: only the config class (and so the saved model_type) changes.
        model.config = config
        model.__class__ = SDARForCausalLM
    else:
        model.config.block_size = block_size
        model.config.mask_token_id = mask_id
        setattr(model.config, DIFFUSION_FIELD, "sdar")
    return mask_id


def as_autoregressive(model: Any) -> None:
    """Drop the SDAR / WeDLM marker so a checkpoint trained with the AR objective saves as an AR model."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if getattr(model.config, "model_type", None) == "sdar":
        config = Qwen3Config(**{k: v for k, v in model.config.to_dict().items()
                                if k not in ("model_type", "architectures", "transformers_version",
                                             "block_size", "mask_token_id")})
        model.config = config
        model.__class__ = Qwen3ForCausalLM
    elif hasattr(model.config, DIFFUSION_FIELD):
        delattr(model.config, DIFFUSION_FIELD)
        for name in ("block_size", "mask_token_id"):
            if hasattr(model.config, name):
                delattr(model.config, name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, block_size: int) -> Path:
    """:func:`convert_to_block_diffusion` on disk: load ``src``, convert, save to ``dst``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import textwm.models.sdar  # noqa: F401

    local = _local_path(src)
    if Path(dst).resolve() == local.resolve():
        raise CheckpointError(f"{dst}: write the converted checkpoint to a new folder")
    tokenizer = AutoTokenizer.from_pretrained(local)
    model = AutoModelForCausalLM.from_pretrained(local, dtype="auto")
    convert_to_block_diffusion(model, tokenizer, block_size)
    out = Path(dst)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
