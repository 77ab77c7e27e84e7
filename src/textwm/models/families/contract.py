"""The model-family contract: everything generic code needs from a model family, in one :class:`ModelFamily`.

A family module (``textwm.models.families.sdar``, ...) builds one ``ModelFamily`` and is named once in
:mod:`textwm.models.families.registry`. Generic code (the trainer, the decoders and the engine, the server
and its launchers, checkpoint reading and conversion, the tiny-model factory) asks the registry
(``get_family(spec.family)``) and never branches on a family's name.

What a family supplies:

* **its pieces**, as ``"module:attribute"`` strings imported on first use (they live in ``training/`` and
  ``generation/``, which import ``models/``, so ``models/`` may not import them): the training objective
  class, the reference decoder class and the static engine's row-state class;
* **what its checkpoints say** — the ``config.json`` model types that are this family whatever else the
  config says, its own config/model classes over a plain architecture (SDAR: Qwen3 -> ``SDARForCausalLM``)
  and the plain classes back, and the fill-ins for what a published config leaves out (block size, mask id,
  stop ids: :mod:`textwm.models.hub`); any other checkpoint of the family is a causal LM whose ``config.json``
  carries the family marker (``"diffusion": <name>``, :data:`~textwm.models.families.registry.DIFFUSION_FIELD`);
* **its rules** — :attr:`ModelFamily.masked` (decoding fills mask tokens) and :attr:`ModelFamily.block_causal`
  (SDAR's fixed blocks), read by the trainer, the decoders, the server and the launchers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def load_attribute(path: str) -> Any:
    """The object a ``"module:attribute"`` string names (the module is imported on first use)."""
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module), attribute)


def no_own_classes(model_type: str) -> tuple[type, type] | None:
    """A family without classes of its own: its checkpoints keep their architecture and carry the marker."""
    return None


def no_fill_in(local: Path, config: dict[str, Any], *args: Any) -> int | None:
    """Nothing to fill in: what ``config.json`` leaves out stays unknown."""
    return None


@dataclass(frozen=True)
class ModelFamily:
    """One model family: its pieces, what its checkpoints say, and the rules generic code applies to it."""

    #: Registry name: ``ModelSpec.family``, the trainer's ``objective``, the ``config.json`` marker's value.
    name: str
    #: ``"module:Class"`` of the training objective (a :class:`textwm.training.objectives.Objective`; the trainer
    #: builds it with ``Class.from_config(sft_config, model, attn_implementation=..., pad_token_id=...)``).
    objective: str
    #: ``"module:Class"`` of the reference decoder (a :class:`textwm.generation.base.Decoder`,
    #: ``Class(model, spec, pad_token_id=...)``).
    decoder: str
    #: ``"module:Class"`` of the static engine's row state (a :class:`textwm.generation.engine.rows.Rows`,
    #: ``Class(ctx)``).
    engine_rows: str
    #: Decoding fills mask tokens (SDAR, WeDLM): the checkpoint needs a mask token and carries ``block_size`` and
    #: ``mask_token_id`` in ``config.json``; its tokenizer gets ``<|MASK|>``; vLLM (left to right) cannot serve it
    #: and it cannot verify speculative drafts.
    masked: bool = False
    #: Block-causal attention over fixed blocks of the checkpoint's ``block_size`` (SDAR): a decoding block length
    #: must divide it (:meth:`~textwm.models.checkpoint.ModelSpec.require_diffusion`), training rows are whole
    #: blocks (``cutoff_len`` a multiple of ``block_length``), a block takes at most ``block_length`` denoising
    #: steps, and lmdeploy's rules (``sdar_rules=lmdeploy``) decode it.
    block_causal: bool = False
    #: ``config.json`` model types that are this family whatever else the config says (SDAR's ``sdar`` and
    #: ``sdar_moe``, Tencent's ``wedlm``).
    model_types: tuple[str, ...] = ()
    #: ``model_type -> (config class, model class)`` of the family's own format over a plain architecture (SDAR:
    #: ``qwen3`` -> ``SDARConfig``, ``SDARForCausalLM``), or None: the checkpoint keeps its classes and is marked.
    own_classes: Callable[[str], tuple[type, type] | None] = no_own_classes
    #: ``config -> (config class, model class)`` of the plain causal LM under one of :attr:`model_types` (what a
    #: checkpoint trained with another objective is saved as); None: the family has no model types of its own.
    plain_classes: Callable[[Any], tuple[type, type]] | None = None
    #: ``(local, config, name, log_level) -> block size`` when ``config.json`` has none (``name``: the path or hub
    #: id the checkpoint was given as; a filled-in value is announced at ``log_level``).
    default_block_size: Callable[[Path, dict[str, Any], str, int], int | None] = no_fill_in
    #: ``(local, config, log_level) -> mask id`` when ``config.json`` has none.
    default_mask_token_id: Callable[[Path, dict[str, Any], int], int | None] = no_fill_in
    #: Generation also stops at the tokenizer's eos token (WeDLM's engine adds it to the config's stop ids).
    stops_at_tokenizer_eos: bool = False
    #: The trainer's warning when it turns a checkpoint of another family into this one, a ``str.format`` template
    #: with ``{path}``, ``{family}`` (the checkpoint's family), ``{name}`` (this one's), ``{block}`` (the block
    #: length) and ``{mask}`` (the new mask id).
    conversion_note: str = "{path} is a {family} checkpoint: trained here as {name}"

    def objective_class(self) -> type:
        return load_attribute(self.objective)

    def decoder_class(self) -> type:
        return load_attribute(self.decoder)

    def rows_class(self) -> type:
        return load_attribute(self.engine_rows)

    def conversion_line(self, path: str, family: str, block: int, mask: int | None) -> str:
        """:attr:`conversion_note` filled in."""
        return self.conversion_note.format(path=path, family=family, block=block, mask=mask, name=self.name)
