"""What every decoder holds (the model, its spec, the pad id; for the diffusion ones the mask id) and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from textwm.models.checkpoint import ModelSpec


@dataclass
class Generation:
    token_ids: list[int]
    #: "stop" (a stop id was generated) or "length" (gen_length reached).
    finish_reason: str
    #: Model forward passes this row took part in (prefill, scratch and commit forwards); under lmdeploy
    #: rules, the forwards lmdeploy runs for the row alone (the batch waits for its slowest row each block).
    num_forwards: int = 0


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

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        """Logits ``[R, Q, V]`` of ``ids [R, Q]`` at ``positions [R, Q]`` under ``mask [R, 1, Q, K]`` (bool), over
        ``cache`` (one of the decoders' KV caches: it keeps what its ``commit`` says)."""
        return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                          use_cache=True).logits


def grow_kv_buffers(keys: list[torch.Tensor], values: list[torch.Tensor], key_states: torch.Tensor,
                    value_states: torch.Tensor, layer_idx: int, capacity: int) -> None:
    """On a layer's first write, preallocate its K/V buffers ``[R, H_kv, capacity, D]`` (shared by the SDAR
    block cache and the WeDLM ragged cache).

    Zeros, not ``empty``: a forward attends over ``[:, :, :end]`` for every row, and in the ragged cache a
    short row's slots up to ``end`` are masked but may never have been written. Masked or not, a NaN there
    poisons attention (``0 * NaN``, ``NaN - inf``), and uninitialised memory holds NaN bit patterns now and
    then: outputs changed from run to run before this."""
    if layer_idx == len(keys):
        shape = (*key_states.shape[:2], capacity, key_states.shape[-1])
        keys.append(key_states.new_zeros(shape))
        values.append(value_states.new_zeros((*shape[:3], value_states.shape[-1])))
