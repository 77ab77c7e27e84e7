"""Choose the decoder of a checkpoint's family."""

from __future__ import annotations

from typing import Any

from textwm.generation.ar import ARDecoder
from textwm.generation.base import Decoder, Generation
from textwm.generation.sdar import SDARDecoder
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import ModelSpec

__all__ = ["ARDecoder", "Generation", "SDARDecoder", "WeDLMDecoder", "make_decoder"]


def make_decoder(model: Any, spec: ModelSpec, *, pad_token_id: int | None = None) -> Decoder:
    """SDAR block diffusion, WeDLM streaming parallel decoding, or left-to-right AR, by ``spec.family``."""
    if spec.family == "sdar":
        return SDARDecoder(model, spec, pad_token_id=pad_token_id)
    if spec.family == "wedlm":
        return WeDLMDecoder(model, spec, pad_token_id=pad_token_id)
    return ARDecoder(model, spec, pad_token_id=pad_token_id)
