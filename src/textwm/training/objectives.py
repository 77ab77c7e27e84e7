"""Training objectives: how a batch becomes a loss. One class per model family.

An objective knows the block size it pads samples to, adds what it needs to a collated batch
(the SDAR noise), and computes the loss normalised by the answer tokens of the whole optimisation
step (``num_items_in_batch``, counted by the HF Trainer over all micro-batches and ranks), so
gradient accumulation and data parallelism give the same gradient as one large batch.
WeDLM is the third class, with the same three methods.

``loss_impl`` chooses how the per-token cross-entropy is taken: ``logits`` (the model's logits at
the loss positions, then cross-entropy) or ``chunked`` (:mod:`textwm.training.linear_ce`: the same
losses from the final hidden states and the lm_head weight, without keeping a ``[positions, vocab]``
float32 logits tensor for the backward pass). The weighting and normalisation after the CE is one
function per objective either way (``*_from_ce`` in :mod:`textwm.diffusion`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from textwm.diffusion.masks import PAD_SAMPLE, build_mask, packed_causal_mask_mod, sdar_mask_mod
from textwm.diffusion.noisy_stream import blocks_with_a_mask, kept_index, length_multiple
from textwm.diffusion.sdar import (
    IGNORE_INDEX,
    MASK_EPS,
    masked_diffusion_loss,
    masked_diffusion_loss_from_ce,
    sample_row_noise,
)
from textwm.diffusion.wedlm import (
    AR_LOSS_WEIGHT,
    reorder_within_blocks,
    sample_block_noise,
    wedlm_loss,
    wedlm_loss_from_ce,
    wedlm_loss_per_micro_batch,
    wedlm_loss_per_micro_batch_from_ce,
    wedlm_mask_mod,
)
from textwm.training.config import LOSS_IMPLS, WEDLM_LOSS_NORMALISATIONS, WEDLM_LOSS_WEIGHTINGS
from textwm.training.data import pad_batch
from textwm.training.linear_ce import model_token_cross_entropy


def _answer_tokens(labels: torch.Tensor, num_items_in_batch: Any) -> Any:
    return num_items_in_batch if num_items_in_batch is not None else (labels != IGNORE_INDEX).sum().clamp(min=1)


def per_sample_noise(batch: dict[str, torch.Tensor], features: Sequence[dict[str, Any]],
                     draw: Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, Any]],
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise of every packed sample from its own seed, so it does not depend on batching or devices.

    ``draw(answer [n] bool, positions [n], seed) -> (masked [n] bool, level)`` is called per
    sample; ``level`` (a scalar or ``[n]``: the masking probability or ratio) is spread over the
    sample's positions. Returns ``(masked [B, L] bool, level [B, L] float)``; padding gets 1.
    """
    answer = batch["labels"] != IGNORE_INDEX
    masked = torch.zeros_like(answer)
    level = torch.ones(answer.shape, dtype=torch.float32)
    for b, feature in enumerate(features):
        sample_ids = batch["sample_ids"][b]
        for sid, seed in enumerate(feature["noise_seeds"]):
            where = (sample_ids == sid).nonzero(as_tuple=True)[0]
            masked[b, where], level[b, where] = draw(answer[b, where], batch["position_ids"][b, where], seed)
    return masked, level


def per_row_noise(batch: dict[str, torch.Tensor], features: Sequence[dict[str, Any]],
                  draw_row: Callable[[list[torch.Tensor], list[int]], list[tuple[torch.Tensor, float]]],
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise of every packed row from its samples' seeds (a rule that looks at the whole row, SDAR's).

    ``draw_row(answers, seeds) -> [(masked [n_s] bool, p)]`` is called once per row with each
    sample's ``answer [n_s]`` bool and seed. Returns ``(masked [B, L] bool, p [B, L] float)``;
    padding gets 1. The noise depends on the row's seeds only, not on batching or devices.
    """
    answer = batch["labels"] != IGNORE_INDEX
    masked = torch.zeros_like(answer)
    level = torch.ones(answer.shape, dtype=torch.float32)
    for b, feature in enumerate(features):
        sample_ids = batch["sample_ids"][b]
        wheres = [(sample_ids == sid).nonzero(as_tuple=True)[0] for sid in range(len(feature["noise_seeds"]))]
        draws = draw_row([answer[b, w] for w in wheres], list(feature["noise_seeds"]))
        for where, (sample_masked, p) in zip(wheres, draws):
            masked[b, where], level[b, where] = sample_masked, p
    return masked, level


class Objective(ABC):
    """The interface the trainer uses."""

    name: str
    #: Samples are padded to a multiple of this (None: no padding).
    block_size: int | None = None
    #: Diffusion objectives: compute only the noisy blocks that hold a mask (:meth:`noisy_part`).
    trim_noisy_copy: bool = True
    #: The model reads a noisy copy of each row next to the clean one (the memory estimate counts it).
    noisy_copy: ClassVar[bool] = False
    #: Loss positions per answer token: WeDLM takes its masked-token and its AR term at each (the memory estimate's
    #: share of loss positions).
    answer_loss_terms: ClassVar[int] = 1

    def __init__(self, *, attn_implementation: str, pad_token_id: int, loss_impl: str = "logits"):
        if loss_impl not in LOSS_IMPLS:
            raise ValueError(f"{type(self).__name__}: loss_impl must be one of {', '.join(LOSS_IMPLS)}, "
                             f"got {loss_impl!r}")
        self.attn_implementation = attn_implementation
        self.pad_token_id = pad_token_id
        self.loss_impl = loss_impl

    @classmethod
    def from_config(cls, config: Any, model: Any, *, attn_implementation: str, pad_token_id: int) -> Objective:
        """The objective an :class:`~textwm.training.sft_config.SFTConfig` asks for, for ``model`` (already of the
        objective's family: a diffusion objective reads its mask id from the model's config)."""
        return cls(attn_implementation=attn_implementation, pad_token_id=pad_token_id, loss_impl=config.loss_impl)

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad rows into ``[B, L]`` tensors (flex attention wants lengths in 128-token tiles)."""
        multiple = 128 if self.attn_implementation == "flex_attention" else (self.block_size or 1)
        return pad_batch(features, pad_token_id=self.pad_token_id, multiple_of=multiple)

    @abstractmethod
    def loss(self, model: Any, batch: dict[str, torch.Tensor], num_items_in_batch: Any = None) -> torch.Tensor:
        """Scalar loss of one micro-batch, already divided by the step's answer-token count."""

    def noisy_part(self, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index [B, N], valid [B, N])`` of the noisy copy's positions to compute: those of ``keep [B, L]``
        (:mod:`textwm.diffusion.noisy_stream`), or every position when ``trim_noisy_copy`` is off."""
        if not self.trim_noisy_copy:
            bsz, length = keep.shape
            return (torch.arange(length, device=keep.device).expand(bsz, length),
                    torch.ones_like(keep, dtype=torch.bool))
        return kept_index(keep, length_multiple(self.attn_implementation))

    @staticmethod
    def chunked_token_ce(model: Any, need: torch.Tensor, targets: torch.Tensor,
                         **model_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``chunked`` CE at the positions ``need [B, S]`` (bool) of the model's input sequence.

        ``targets [B, S]``: the token each needed position predicts. Returns ``(ce [N] float32,
        keep [K], sel [B, K])``: ``keep`` the positions needed by some row (the hidden states that are
        projected, as ``logits_to_keep``), ``sel = need[:, keep]``, ``ce`` in the row-major order of ``sel``.
        """
        keep = need.any(dim=0).nonzero(as_tuple=True)[0]
        sel = need[:, keep]
        ce = model_token_cross_entropy(model, keep=keep, select=sel, targets=targets[:, keep][sel], **model_inputs)
        return ce, keep, sel


class ARObjective(Objective):
    """Next-token cross-entropy over answer tokens, causal attention inside each packed sample."""

    name = "ar"

    def loss(self, model, batch, num_items_in_batch=None):
        ids, labels = batch["input_ids"], batch["labels"]
        bsz, length = ids.shape
        mask = build_mask(packed_causal_mask_mod(batch["sample_ids"]), bsz, length, length, ids.device,
                          attn_implementation=self.attn_implementation)
        if self.loss_impl == "chunked":
            # Position i predicts labels[i + 1]; the last position predicts nothing.
            next_labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], 1)
            ce = self.chunked_token_ce(model, next_labels != IGNORE_INDEX, next_labels, input_ids=ids,
                                       position_ids=batch["position_ids"], attention_mask=mask, use_cache=False)[0]
            return ce.sum() / _answer_tokens(labels, num_items_in_batch)
        logits = model(input_ids=ids, position_ids=batch["position_ids"], attention_mask=mask, use_cache=False).logits
        targets = labels[:, 1:]
        keep = targets != IGNORE_INDEX
        ce = F.cross_entropy(logits[:, :-1][keep].float(), targets[keep], reduction="sum")
        return ce / _answer_tokens(labels, num_items_in_batch)


class SDARObjective(Objective):
    """Masked-token CE per block over ``[x_t, x_0]`` (:mod:`textwm.diffusion.sdar`).

    ``trim_noisy_copy``: ``x_t`` holds only the blocks with a masked token (:mod:`textwm.diffusion.noisy_stream`:
    the same loss and gradients at about half the tokens for SFT rows); off, every block, as upstream lays it out.
    """

    name = "sdar"
    noisy_copy = True

    def __init__(self, *, attn_implementation: str, pad_token_id: int, mask_token_id: int, block_size: int,
                 mask_eps: float = MASK_EPS, loss_impl: str = "logits", trim_noisy_copy: bool = True):
        super().__init__(attn_implementation=attn_implementation, pad_token_id=pad_token_id, loss_impl=loss_impl)
        self.mask_token_id = mask_token_id
        self.block_size = block_size
        self.mask_eps = mask_eps
        self.trim_noisy_copy = trim_noisy_copy

    @classmethod
    def from_config(cls, config, model, *, attn_implementation, pad_token_id):
        return cls(mask_token_id=int(model.config.mask_token_id), block_size=config.block_length,
                   mask_eps=config.mask_eps, attn_implementation=attn_implementation, pad_token_id=pad_token_id,
                   loss_impl=config.loss_impl)

    def collate(self, features):
        """Pad, then draw each row's noise from its samples' seeds: ``noise_mask [B, L]``, ``noise_p [B, L]``."""
        batch = super().collate(features)
        batch["noise_mask"], batch["noise_p"] = per_row_noise(
            batch, features, lambda answers, seeds: sample_row_noise(answers, seeds, self.mask_eps))
        return batch

    def loss(self, model, batch, num_items_in_batch=None):
        ids, labels, masked, pos, sid = (batch[k] for k in ("input_ids", "labels", "noise_mask", "position_ids",
                                                             "sample_ids"))
        bsz, length = ids.shape
        index, valid = self.noisy_part(blocks_with_a_mask(masked, pos, sid, self.block_size))
        noisy_len = index.shape[1]
        xt_ids = torch.where(masked, torch.full_like(ids, self.mask_token_id), ids).gather(1, index)
        xt_sid = torch.where(valid, sid.gather(1, index), PAD_SAMPLE)
        xt_masked, xt_targets = masked.gather(1, index) & valid, ids.gather(1, index)    # [B, N]
        xt_p = batch["noise_p"].gather(1, index)
        ids2, pos2, sid2 = (torch.cat(pair, 1) for pair in ((xt_ids, ids), (pos.gather(1, index), pos), (xt_sid, sid)))
        total = noisy_len + length
        mask = build_mask(sdar_mask_mod(pos2, sid2, self.block_size, noisy_len), bsz, total, total,
                          ids.device, attn_implementation=self.attn_implementation)
        # Only positions masked in some row need logits: the vocabulary projection of the rest
        # (prompt, unmasked answer, the whole clean copy) would be wasted memory.
        if self.loss_impl == "chunked":
            need, targets = F.pad(xt_masked, (0, length)), F.pad(xt_targets, (0, length))  # nothing from x_0
            ce, keep, sel = self.chunked_token_ce(model, need, targets, input_ids=ids2, position_ids=pos2,
                                                  attention_mask=mask, use_cache=False)
            return masked_diffusion_loss_from_ce(ce, xt_p[:, keep][sel], _answer_tokens(labels, num_items_in_batch))
        keep = xt_masked.any(dim=0).nonzero(as_tuple=True)[0]
        logits = model(input_ids=ids2, position_ids=pos2, attention_mask=mask, logits_to_keep=keep,
                       use_cache=False).logits
        sel = xt_masked[:, keep]
        return masked_diffusion_loss(logits[sel], xt_targets[:, keep][sel], xt_p[:, keep][sel],
                                     _answer_tokens(labels, num_items_in_batch))


class WeDLMObjective(Objective):
    """Masked recovery under causal attention over ``[x0, xt]`` plus the AR loss (:mod:`textwm.diffusion.wedlm`).

    Samples are not padded (WeDLM's last block may be short): ``block_size`` stays None and the
    noise block is ``noise_block``. ``loss_normalisation``: ``step_tokens`` (the step's answer
    tokens, like the other objectives) or ``micro_batch`` (Tencent/WeDLM's, averaged over the step's
    ``accumulation_steps`` x world-size micro-batches); see :mod:`textwm.diffusion.wedlm`.
    ``ar_weight``: ``w`` of ``(mlm + w * ar) / (1 + w)``; 0 drops the AR term (and its logits), which is
    Tencent/WeDLM's ``enable_ar_loss: false`` (``trainer.py`` ``train_step``: the loss is then ``mlm``).
    ``weighting``: ``weighted`` (1/gamma) or ``uniform``, Tencent/WeDLM's ``loss_weighting_scheme``
    (``loss.py`` ``compute_mlm_loss``: a plain mean of the masked CE): every gamma is taken as 1, which
    under ``micro_batch`` is exactly that mean and under ``step_tokens`` the masked CE summed over the
    step's answer tokens. ``trim_noisy_copy``: as :class:`SDARObjective`'s (``xt`` holds only blocks with a mask).
    """

    name = "wedlm"
    noisy_copy = True
    answer_loss_terms = 2

    def __init__(self, *, attn_implementation: str, pad_token_id: int, mask_token_id: int, noise_block: int,
                 loss_normalisation: str = "step_tokens", accumulation_steps: int = 1,
                 ar_weight: float = AR_LOSS_WEIGHT, weighting: str = "weighted", loss_impl: str = "logits",
                 trim_noisy_copy: bool = True):
        super().__init__(attn_implementation=attn_implementation, pad_token_id=pad_token_id, loss_impl=loss_impl)
        self.trim_noisy_copy = trim_noisy_copy
        if loss_normalisation not in WEDLM_LOSS_NORMALISATIONS:
            raise ValueError(f"WeDLMObjective: loss_normalisation must be one of "
                             f"{', '.join(WEDLM_LOSS_NORMALISATIONS)}, got {loss_normalisation!r}")
        if weighting not in WEDLM_LOSS_WEIGHTINGS:
            raise ValueError(f"WeDLMObjective: weighting must be one of {', '.join(WEDLM_LOSS_WEIGHTINGS)}, "
                             f"got {weighting!r}")
        if not ar_weight >= 0:
            raise ValueError(f"WeDLMObjective: ar_weight must be >= 0, got {ar_weight}")
        self.ar_weight = ar_weight
        self.weighting = weighting
        self.mask_token_id = mask_token_id
        self.noise_block = noise_block
        self.loss_normalisation = loss_normalisation
        self.accumulation_steps = accumulation_steps

    @classmethod
    def from_config(cls, config, model, *, attn_implementation, pad_token_id):
        return cls(mask_token_id=int(model.config.mask_token_id), noise_block=config.block_length,
                   loss_normalisation=config.wedlm_loss_normalisation,
                   accumulation_steps=config.gradient_accumulation_steps, ar_weight=config.wedlm_ar_loss_weight,
                   weighting=config.wedlm_loss_weighting, attn_implementation=attn_implementation,
                   pad_token_id=pad_token_id, loss_impl=config.loss_impl)

    def micro_batches_per_step(self, num_items_in_batch: Any) -> int:
        """How many micro-batch losses the ``micro_batch`` normalisation averages per optimisation step.

        1 outside training (``num_items_in_batch`` None: eval, a direct call). In training, the
        accumulation steps times the data-parallel world size: :class:`WorldModelTrainer` multiplies
        a rank's loss by the world size and DDP averages the ranks, so dividing by both here makes the
        step's gradient the mean of its micro-batch losses (upstream: accelerate's
        ``backward(loss / accumulation)`` and DDP's average).
        """
        if num_items_in_batch is None:
            return 1
        dist = torch.distributed
        return self.accumulation_steps * (dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1)

    def collate(self, features):
        """Pad, then draw each sample's per-block masks from its seed: ``noise_mask``, ``noise_gamma`` ``[B, L]``."""
        batch = super().collate(features)
        batch["noise_mask"], batch["noise_gamma"] = per_sample_noise(
            batch, features, lambda answer, positions, seed: sample_block_noise(answer, positions, self.noise_block, seed))
        return batch

    def loss(self, model, batch, num_items_in_batch=None):
        ids, labels, masked, pos, sid = (batch[k] for k in ("input_ids", "labels", "noise_mask", "position_ids",
                                                             "sample_ids"))
        bsz, length = ids.shape
        order = reorder_within_blocks(masked, pos, sid, self.noise_block)
        # The reordering keeps each (sample, block) contiguous, so dropping whole blocks keeps xt's layout.
        index, valid = self.noisy_part(blocks_with_a_mask(masked, pos, sid, self.noise_block).gather(1, order))
        order = order.gather(1, index)                                              # [B, N]
        noisy = torch.where(masked, torch.full_like(ids, self.mask_token_id), ids)
        xt, xt_pos, xt_sid, xt_masked = (t.gather(1, order) for t in (noisy, pos, sid, masked))
        xt_sid, xt_masked = torch.where(valid, xt_sid, PAD_SAMPLE), xt_masked & valid
        ids2, pos2, sid2 = torch.cat([ids, xt], 1), torch.cat([pos, xt_pos], 1), torch.cat([sid, xt_sid], 1)
        total = length + order.shape[1]
        mask = build_mask(wedlm_mask_mod(pos2, sid2, self.noise_block, length), bsz, total, total,
                          ids.device, attn_implementation=self.attn_implementation)
        # Logits only where a loss is taken: clean positions followed by an answer token (AR) and
        # prediction-stream mask slots (MLM); the vocabulary projection of the rest would be wasted.
        ar_at = torch.zeros_like(masked)
        if self.ar_weight > 0:
            ar_at[:, :-1] = labels[:, 1:] != IGNORE_INDEX
        need = torch.cat([ar_at, xt_masked], 1)
        targets = torch.cat([torch.roll(ids, -1, dims=1), ids.gather(1, order)], 1)
        xt_gamma = batch["noise_gamma"].gather(1, order)
        if self.weighting == "uniform":
            xt_gamma = torch.ones_like(xt_gamma)
        gamma = torch.cat([torch.ones_like(batch["noise_gamma"]), xt_gamma], 1)
        inputs = dict(input_ids=ids2, position_ids=pos2, attention_mask=mask, use_cache=False)
        if self.loss_impl == "chunked":
            ce, keep, sel = self.chunked_token_ce(model, need, targets, **inputs)
            is_mlm = (keep >= length).expand_as(sel)[sel]                # [N]: an xt slot, else an AR position
            terms = (ce[is_mlm], gamma[:, keep][sel][is_mlm], ce[~is_mlm])
            return self._normalise(terms, labels, num_items_in_batch, from_ce=True)
        keep = need.any(dim=0).nonzero(as_tuple=True)[0]
        logits = model(**inputs, logits_to_keep=keep).logits
        sel = need[:, keep]
        in_clean = keep < length
        ar_sel, mlm_sel = sel & in_clean, sel & ~in_clean
        targets, gamma = targets[:, keep], gamma[:, keep]
        terms = (logits[mlm_sel], targets[mlm_sel], gamma[mlm_sel], logits[ar_sel], targets[ar_sel])
        return self._normalise(terms, labels, num_items_in_batch, from_ce=False)

    def _normalise(self, terms: tuple, labels: torch.Tensor, num_items_in_batch: Any, *,
                   from_ce: bool) -> torch.Tensor:
        """The loss by ``loss_normalisation`` from ``terms``: ``(mlm ce, gamma, ar ce)`` when ``from_ce``,
        else ``(mlm logits, mlm targets, gamma, ar logits, ar targets)``."""
        if self.loss_normalisation == "micro_batch":
            per_micro_batch = wedlm_loss_per_micro_batch_from_ce if from_ce else wedlm_loss_per_micro_batch
            return (per_micro_batch(*terms, ar_weight=self.ar_weight)
                    / self.micro_batches_per_step(num_items_in_batch))
        step_tokens = wedlm_loss_from_ce if from_ce else wedlm_loss
        return step_tokens(*terms, _answer_tokens(labels, num_items_in_batch), ar_weight=self.ar_weight)


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens of a batch (throughput accounting)."""
    return int((batch["sample_ids"] != PAD_SAMPLE).sum())
