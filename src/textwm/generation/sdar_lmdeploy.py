"""SDAR decoding by lmdeploy's dllm rules (``sdar_rules="lmdeploy"``): how the paper served its world models.

The paper ran ``lmdeploy serve api_server <ckpt> --dllm-block-length 8 --dllm-denoising-steps 1`` (default
strategy ``low_confidence_dynamic``, threshold 0.85). These are InternLM/lmdeploy's rules
(``lmdeploy/pytorch/strategies/dllm/``, read at 1263d5c; unchanged since SDAR support in a96391b), per prompt:

* **Layout** (``sequence.py`` ``SchedulerSequenceDLLM._update_token_ids_inputs``): the prompt is padded with
  masks to a block multiple; the prefill forward runs all of it (block-causal attention,
  ``models/sdar.py`` ``block_sparse_size``) and its last block's logits are the first denoising step of the
  block holding the prompt's tail (prompt tokens are UNMASKED: never overwritten). A prompt that is a
  block multiple gets a prefill of its own, then a first block of masks.
* **Per forward** (``unmasking.py`` ``UnmaskingProcessor``): every position is sampled; the scores are the
  softmax probabilities of the sampled tokens under the logits after repetition penalty and temperature,
  *before* top-k/top-p (``engine/model_agent/agent.py`` ``async_sampling_logits`` passes those logits on);
  the mask token is not banned. Then, over the masked positions only:
  ``low_confidence_dynamic`` unmasks every one with score ``>= threshold`` and always the best one, so the
  step count is not used and a block takes 1 to ``block_length`` forwards; ``low_confidence_static`` the
  ``max(1, block_length // steps)`` best; ``sequential`` the next ``max(1, block_length // steps)`` from the
  first masked one (``_get_denoise_num``: no remainder spreading, so 8 // 3 = 2 a forward, 4 forwards).
* **Commit** (``step_inputs.py`` ``_update_dllm``): a block that comes into a forward fully unmasked is
  committed by that forward (its K/V kept, its logits dropped): a separate forward, not fused with the
  next block's first one.
* **Stop** (``model_agent.py`` ``DLLMStoppingCriteria.step``, ``_check_stopwords_dllm``): checked when a
  block becomes fully unmasked. ``max_tokens`` is an exact cap (``num_appendable_ids``); a stop id ends the
  output after it, but stop ids in the block holding the prompt's tail are ignored (``output_start_pos``
  is set past the mask padding) and, when the length limit falls in the same block, the length wins.
  The API drops a trailing stop id (``serve/core/async_engine.py`` ``generate``): finish "stop".
* **Repetition penalty** (``engine/logits_process.py`` ``_process_repetition_penalty_``,
  ``strategies/ar/sampling.py`` ``_gather_generated_ids``): over the tokens of the fully decoded blocks
  only (not the prompt, not the current block), once per distinct token.

Not reproduced: lmdeploy also penalises the padding id of rows with fewer generated tokens than others in
its batch (a batch-dependent effect); here a row decodes as if alone. Its mask id is hard-coded (151669,
``pytorch/configurations/sdar.py``); here it is the checkpoint's.

"As if alone" holds for greedy decoding. A seeded draw shares one generator across the batch, and rows whose
block is done keep drawing during the batch's remaining forwards, so seeded samples depend on the batch-mates
(as in the WeDLM decoder); lmdeploy's own random stream is not reproduced either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from textwm.generation.base import Generation, MaskDecoder
from textwm.generation.sampling import RowParams, apply_repetition_penalty, sample, sample_rows
from textwm.generation.sdar_blocks import BlockBatch
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec

log = logging.getLogger(__name__)


def denoise_num(block_length: int, steps: int) -> int:
    """Tokens a static or sequential forward unmasks (lmdeploy ``UnmaskingProcessor._get_denoise_num``)."""
    return max(1, min(block_length // steps, block_length))


def _dynamic(masked: torch.Tensor, score: torch.Tensor, *, num: int, threshold: float) -> torch.Tensor:
    best = torch.zeros_like(masked).scatter_(1, score.argmax(dim=-1, keepdim=True), True)  # leftmost best
    return masked & ((score >= threshold) | best)


def _static(masked: torch.Tensor, score: torch.Tensor, *, num: int, threshold: float) -> torch.Tensor:
    top = torch.sort(score, dim=-1, descending=True, stable=True).indices[:, :num]
    return masked & torch.zeros_like(masked).scatter_(1, top, True)


def _sequential(masked: torch.Tensor, score: torch.Tensor, *, num: int, threshold: float) -> torch.Tensor:
    first = masked.int().argmax(dim=-1, keepdim=True)                       # 0 for a row without masks
    idx = (first + torch.arange(num, device=masked.device)[None, :]) % masked.shape[-1]
    return masked & torch.zeros_like(masked).scatter_(1, idx, True)


_UNMASK: dict[str, Callable[..., torch.Tensor]] = {
    "low_confidence_dynamic": _dynamic, "low_confidence_static": _static, "sequential": _sequential}


def lmdeploy_unmask(strategy: str, masked: torch.Tensor, confidence: torch.Tensor, *, num: int,
                    threshold: float) -> torch.Tensor:
    """Positions one forward unmasks: ``[R, B]`` bool, a subset of ``masked`` (``UnmaskingProcessor``).

    Args:
        masked: ``[R, B]`` positions still masked (MASKED in lmdeploy's ``dllm_mask``).
        confidence: ``[R, B]`` score of each position's sampled token; positions not masked count as 0.
        num: :func:`denoise_num` (static and sequential).
        threshold: the dynamic strategy's confidence threshold.
    """
    if strategy not in _UNMASK:
        raise ValueError(f"lmdeploy has no unmasking strategy {strategy!r} (lmdeploy/pytorch/strategies/dllm/"
                         f"unmasking.py); choose one of {', '.join(_UNMASK)}")
    score = confidence.masked_fill(~masked, 0.0)
    return _UNMASK[strategy](masked, score, num=num, threshold=threshold)


def lmdeploy_sample(logits: torch.Tensor, settings: DecodeSettings, *, penalized: torch.Tensor | None = None,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and their scores ``[R, B]`` for the logits ``[R, B, V]`` of a forward (``FusedLogitsProcessor``).

    Repetition penalty over ``penalized [R, V]`` (the generated tokens), then temperature; the score is
    the softmax probability of the sampled token there, before top-k/top-p narrow the draw. Greedy
    (``temperature == 0``: lmdeploy's ``top_k = 1``) takes the argmax; the mask token is not banned.
    """
    logits = logits.float()
    if penalized is not None:
        logits = apply_repetition_penalty(logits, penalized, settings.repetition_penalty)
    flat = logits.reshape(-1, logits.shape[-1])
    if settings.temperature == 0:
        tokens = flat.argmax(dim=-1)
    else:
        flat = flat / settings.temperature
        tokens = sample(flat, temperature=1.0, top_k=settings.top_k, top_p=settings.top_p,
                        generator=generator).tokens
    confidence = torch.softmax(flat, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens.view(logits.shape[:2]), confidence.view(logits.shape[:2])


def lmdeploy_sample_rows(logits: torch.Tensor, rows: RowParams, *, penalty: torch.Tensor | None = None,
                         penalized: torch.Tensor | None = None,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`lmdeploy_sample` with each row's own settings (lmdeploy's are per request: ``SamplingInputs``).

    Args:
        logits: ``[R, B, V]`` of a forward.
        rows: the sampling settings of the ``R`` rows.
        penalty: ``[R]`` repetition penalty per row (1: off), with ``penalized [R, V]`` the tokens it hits;
            both None when no row penalises.

    Row by row this is :func:`lmdeploy_sample`: penalty, then the row's temperature (greedy rows unscaled:
    lmdeploy's ``top_k = 1``), the score under that, and the draw after the row's top-k/top-p; all-greedy
    rows take the argmax alone.
    """
    logits = logits.float()
    if penalized is not None:
        logits = apply_repetition_penalty(logits, penalized, penalty)
    flat = logits.reshape(-1, logits.shape[-1])
    if rows.all_greedy:
        tokens = flat.argmax(dim=-1)
    else:
        per_position = rows.repeat(logits.shape[1])
        flat = flat / per_position.divisor()
        unit = replace(per_position, temperature=(per_position.temperature > 0).float())  # scaled once, above
        tokens = sample_rows(flat, unit, generator=generator).tokens
    confidence = torch.softmax(flat, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens.view(logits.shape[:2]), confidence.view(logits.shape[:2])


def block_stops(block: torch.Tensor, appendable: torch.Tensor, ignore_stops: torch.Tensor,
                stop_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Which rows stop after this fully decoded block, and where their output ends in it.

    ``DLLMStoppingCriteria.step`` + ``_check_stopwords_dllm`` + ``set_stop_pos``: a row stops when its
    ``appendable [R]`` (new tokens still allowed, counted from the block's first position, after this
    block) is ``<= 0`` (the output ends ``appendable`` tokens before the block's end) or when the block
    holds a stop id (ends after the first one); the length wins when both hold. Rows where
    ``ignore_stops [R]`` see no stop ids. Returns ``stopped [R]`` and the exclusive end ``[R]``.
    """
    blk = block.shape[-1]
    by_length = appendable <= 0
    is_stop = torch.isin(block, stop_ids) & ~ignore_stops[:, None]
    by_word = is_stop.any(dim=-1)
    pos = torch.where(by_length, blk - 1 + appendable, is_stop.int().argmax(dim=-1))
    stopped = by_length | by_word
    return stopped, torch.where(stopped, pos + 1, torch.full_like(pos, blk))


def finish_lmdeploy(tokens: list[int], stop_ids: Sequence[int]) -> Generation:
    """The API's answer: a trailing stop id is dropped and finishes as "stop" (``AsyncEngine.generate``)."""
    if tokens and tokens[-1] in stop_ids:
        return Generation(token_ids=tokens[:-1], finish_reason="stop")
    return Generation(token_ids=tokens, finish_reason="length")


def check_lmdeploy_settings(spec: ModelSpec, settings: DecodeSettings) -> None:
    """Raise if ``settings`` cannot be decoded by lmdeploy's rules for the checkpoint ``spec``."""
    if settings.remasking_strategy not in _UNMASK:
        raise ValueError(f"sdar_rules=lmdeploy: lmdeploy has no strategy {settings.remasking_strategy!r}; "
                         f"choose one of {', '.join(_UNMASK)}")
    spec.require_diffusion(settings.block_length, rules="lmdeploy")


def generate_lmdeploy(decoder: MaskDecoder, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                      budgets: torch.Tensor) -> list[Generation]:
    """Decode ``prompts`` (non-empty token id lists) by lmdeploy's rules (module docstring), batched.

    Rows unmask at their own pace; a row whose block is done waits (its scratch forwards change nothing)
    until every row's is, then the batch commits together. ``num_forwards`` counts the forwards lmdeploy
    runs for the row alone (prefill, unmasking forwards, commits; none after the last block).

    Args:
        budgets: ``[n]`` max new tokens per row (an exact cap, as lmdeploy's ``max_tokens``).
    """
    check_lmdeploy_settings(decoder.spec, settings)
    blk, dev = settings.block_length, decoder.device
    num = denoise_num(blk, settings.denoising_steps)
    gen = torch.Generator(device=dev).manual_seed(settings.seed) if settings.seed is not None else None
    n = len(prompts)
    batch = BlockBatch(decoder, prompts, blk, budgets)
    block = batch.first_block()
    tails = batch.lengths - batch.full_blocks.to(dev) * blk                   # [n] prompt tokens in block 1
    masked = torch.arange(blk, device=dev)[None, :] >= tails[:, None]          # [R, blk]
    gen_from, ignore_stops = tails, tails > 0                                  # see block_stops
    appendable = budgets.to(dev) + tails                                       # make_stopping_criteria
    forwards = 1 + (tails == 0).long().cpu()                                   # a block-multiple prompt: own prefill
    penalize = settings.repetition_penalty != 1.0
    vocab = decoder.model.get_output_embeddings().weight.shape[0]
    seen = torch.zeros((n, vocab if penalize else 1), dtype=torch.bool, device=dev)  # generated tokens per row
    stop_ids = torch.tensor(decoder.spec.stop_ids or (), dtype=torch.long, device=dev)
    outputs: list[list[int]] = [[] for _ in range(n)]
    results: list[Generation | None] = [None] * n
    logits = batch.prefill(block)
    while True:
        while True:                                                            # unmasking forwards
            tokens, confidence = lmdeploy_sample(logits, settings, penalized=seen if penalize else None,
                                                 generator=gen)
            new = lmdeploy_unmask(settings.remasking_strategy, masked, confidence, num=num,
                                  threshold=settings.confidence_threshold)
            block, masked = torch.where(new, tokens, block), masked & ~new
            live = masked.any(dim=-1)
            if not live.any():
                break
            forwards[batch.rows[live].cpu()] += 1
            logits = batch.forward(block)
        appendable = appendable - blk
        stopped, end = block_stops(block, appendable, ignore_stops, stop_ids)
        rows = zip(batch.rows.tolist(), block.tolist(), gen_from.tolist(), end.tolist(), stopped.tolist())
        for r, (orig, row, first, last, done) in enumerate(rows):
            outputs[orig] += row[first:last]
            if done:
                results[orig] = finish_lmdeploy(outputs[orig], decoder.spec.stop_ids)
            elif penalize and last > first:
                seen[r, torch.tensor(row[first:last], device=dev)] = True
        keep = ~stopped
        if not keep.any():
            break
        if not keep.all():
            block, appendable, seen = batch.keep(keep, block, appendable, seen)
        batch.commit(block)
        forwards[batch.rows.cpu()] += 1
        block = torch.full((batch.rows.numel(), blk), decoder.mask_id, dtype=torch.long, device=dev)
        masked = torch.ones_like(block, dtype=torch.bool)
        gen_from = torch.zeros(block.shape[0], dtype=torch.long, device=dev)
        ignore_stops = torch.zeros_like(gen_from, dtype=torch.bool)
        logits = batch.forward(block)
        forwards[batch.rows.cpu()] += 1
    for res, f in zip(results, forwards.tolist()):
        res.num_forwards = f
    return results
