"""What every decoder holds: the model, its spec, the pad id and, for the diffusion ones, the mask id."""

from __future__ import annotations

from typing import Any

import torch

from textwm.models.checkpoint import ModelSpec


class Decoder:
    """Base of the AR, SDAR and WeDLM decoders (``generate(prompts, settings, gen_lengths)`` is theirs)."""

    family = ""

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        self.model = model
        self.spec = spec
        self.pad_id = int(pad_token_id if pad_token_id is not None else (spec.pad_token_id or 0))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


class MaskDecoder(Decoder):
    """A decoder that fills mask tokens (SDAR, WeDLM): the checkpoint must name its mask token."""

    def __init__(self, model: Any, spec: ModelSpec, *, pad_token_id: int | None = None):
        if spec.mask_token_id is None:
            spec.require_diffusion(1)  # raises the explanatory error
        super().__init__(model, spec, pad_token_id=pad_token_id)
        self.mask_id = int(spec.mask_token_id)
