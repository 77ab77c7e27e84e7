"""Choose the decoder of a checkpoint's family (WeDLM's streaming decoder joins here)."""

from __future__ import annotations

from typing import Any

from textwm.generation.ar import ARDecoder
from textwm.generation.sdar import DecodeSettings, Generation, SDARDecoder
from textwm.models.checkpoint import ModelSpec

__all__ = ["ARDecoder", "DecodeSettings", "Generation", "SDARDecoder", "make_decoder"]


def make_decoder(model: Any, spec: ModelSpec, *, pad_token_id: int | None = None) -> ARDecoder | SDARDecoder:
    """SDAR block diffusion for ``spec.family == "sdar"``, else left-to-right AR decoding."""
    if spec.family == "sdar":
        return SDARDecoder(model, spec, pad_token_id=pad_token_id)
    return ARDecoder(model, spec, pad_token_id=pad_token_id)
