"""Choose the decoder of a checkpoint's family, and whether the static-shape engine runs it."""

from __future__ import annotations

import logging
from typing import Any

from textwm.generation import DECODER_ENGINES
from textwm.generation.ar import ARDecoder
from textwm.generation.base import Decoder, Generation
from textwm.generation.sdar import SDARDecoder
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import ModelSpec
from textwm.models.families import get_family

__all__ = ["ARDecoder", "Generation", "SDARDecoder", "WeDLMDecoder", "make_decoder"]

log = logging.getLogger(__name__)


def reference_decoder(model: Any, spec: ModelSpec, *, pad_token_id: int | None = None) -> Decoder:
    """The reference decoder of ``spec.family`` (its family's: SDAR block diffusion, WeDLM streaming parallel
    decoding, left-to-right AR, ...)."""
    return get_family(spec.family).decoder_class()(model, spec, pad_token_id=pad_token_id)


def make_decoder(model: Any, spec: ModelSpec, *, pad_token_id: int | None = None, engine: str = "auto") -> Decoder:
    """The decoder of ``spec.family``.

    Args:
        engine: ``"static"`` (the static-shape engine, :mod:`textwm.generation.engine`: CUDA graphs on a
            GPU), ``"reference"`` (the batched decoders of this package: the reference path), or ``"auto"``:
            static on CUDA, reference on CPU (where graphs do not exist and the reference is as fast).
    """
    if engine not in DECODER_ENGINES:
        raise ValueError(f"unknown decoder engine {engine!r}; choose one of {', '.join(DECODER_ENGINES)}")
    on_cuda = next(model.parameters()).device.type == "cuda"
    if engine == "reference" or (engine == "auto" and not on_cuda):
        return reference_decoder(model, spec, pad_token_id=pad_token_id)
    # heavy: the engine loads transformers; the reference decoders need only torch
    from textwm.generation.engine.decoder import EngineDecoder
    from textwm.generation.engine.static_model import UnsupportedModel

    try:
        return EngineDecoder(model, spec, pad_token_id=pad_token_id)
    except UnsupportedModel as exc:
        if engine == "static":
            raise
        log.warning("decoding with the reference decoder: %s", exc)
        return reference_decoder(model, spec, pad_token_id=pad_token_id)
