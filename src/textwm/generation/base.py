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


def grow_kv_buffers(keys: list[torch.Tensor], values: list[torch.Tensor], key_states: torch.Tensor,
                    value_states: torch.Tensor, layer_idx: int, capacity: int) -> None:
    """On a layer's first write, preallocate its K/V buffers ``[R, H_kv, capacity, D]`` (shared by the SDAR
    block cache and the WeDLM ragged cache)."""
    if layer_idx == len(keys):
        shape = (*key_states.shape[:2], capacity, key_states.shape[-1])
        keys.append(key_states.new_empty(shape))
        values.append(value_states.new_empty((*shape[:3], value_states.shape[-1])))
