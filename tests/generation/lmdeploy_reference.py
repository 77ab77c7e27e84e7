"""A slow, single-row port of lmdeploy's dllm (SDAR) decoding, recomputing every forward without a cache.

Written from InternLM/lmdeploy ``lmdeploy/pytorch/strategies/dllm/`` (read at commit 1263d5c; the rules have
not changed since SDAR support landed in a96391b): it keeps lmdeploy's per-position states and its control
flow literally, and shares no code with the batched decoder (``textwm.generation.sdar_lmdeploy``), which must
match it token for token (greedy). What the model sees at each forward:

* the prompt is padded with masks to a block multiple; the prefill forward runs all of it with the
  block-causal mask and its last block's logits decode that block (the prompt's tail is kept);
* a forward whose block is all UNMASKED at input is the *commit* forward: its K/V are kept, its logits
  are dropped, and a fresh block of masks follows (a separate forward, not fused with the next block's);
* any other forward samples every position and unmasks some masked ones by the strategy.

Greedy only (``temperature == 0``: lmdeploy turns it into ``top_k = 1``).
"""

from __future__ import annotations

import torch

# lmdeploy/pytorch/consts.py
MASKED, UNMASKED, CACHED = 0, 1, 2


def _block_logits(model, ids: list[int], block: int) -> torch.Tensor:
    """Logits ``[block, V]`` of the last block of ``ids`` under the block-causal mask, positions from 0.

    lmdeploy's SDAR attention (``models/sdar.py`` -> ``Attention(block_sparse_size=dllm_block_length)``,
    kernel ``kernels/cuda/flashattention.py``): query at position p sees key k iff ``k // B * B <= p``.
    """
    n = len(ids)
    blocks = torch.arange(n) // block
    attn = (blocks[None, :] <= blocks[:, None])[None, None]
    out = model(input_ids=torch.tensor([ids]), position_ids=torch.arange(n)[None], attention_mask=attn)
    return out.logits[0, -block:].float()


def _denoise_num(block: int, steps: int) -> int:
    """``UnmaskingProcessor._get_denoise_num``: tokens per forward for the static and sequential strategies."""
    return max(1, min(block // steps, block))


def _unmask(strategy: str, state: list[int], scores: list[float], *, block: int, steps: int,
            threshold: float) -> list[int]:
    """``UnmaskingProcessor.low_confidence_static / low_confidence_dynamic / sequential`` on one block."""
    masked = [s == MASKED for s in state]
    scores = [c if m else 0.0 for c, m in zip(scores, masked)]          # non-masked positions score 0
    state = list(state)
    if strategy == "low_confidence_dynamic":
        top = max(range(block), key=lambda i: (scores[i], -i))           # topk(1): the best (leftmost on ties)
        scores[top] = threshold                                          # ... always passes the threshold
        for i in range(block):
            if masked[i] and scores[i] >= threshold:
                state[i] = UNMASKED
    elif strategy == "low_confidence_static":
        order = sorted(range(block), key=lambda i: (-scores[i], i))
        for i in order[:_denoise_num(block, steps)]:
            if masked[i]:
                state[i] = UNMASKED
    elif strategy == "sequential":
        first = masked.index(True) if any(masked) else 0
        for j in range(_denoise_num(block, steps)):
            i = (first + j) % block
            if masked[i]:
                state[i] = UNMASKED
    else:
        raise ValueError(f"lmdeploy has no strategy {strategy!r}")
    return state


@torch.no_grad()
def lmdeploy_reference(model, prompt, *, mask_id, stop_ids, settings):
    """``(token_ids, finish_reason, forwards)`` lmdeploy's api_server would give for ``prompt`` (chat ids)."""
    if settings.temperature != 0:
        raise ValueError("the reference is greedy only")
    B, steps, gen_length = settings.block_length, settings.denoising_steps, settings.gen_length
    # SchedulerSequenceDLLM._update_token_ids_inputs: pad with masks to a block multiple.
    pad = -len(prompt) % B
    ids = list(prompt) + [mask_id] * pad
    state = [UNMASKED] * len(prompt) + [MASKED] * pad
    output_start_pos = len(ids)      # (sic) num_valid_ids (0) + len(padded ids): the prompt's last block is ignored
    num_valid_ids = len(prompt)
    # DLLMModelAgentStrategy.make_stopping_criteria
    num_appendable = gen_length + num_valid_ids % B
    generated: list[int] = []        # SchedulerSequenceDLLM.generated_ids: tokens of fully decoded blocks
    cur = len(ids) - B               # the block the next forward decodes (the prefill: the prompt's last one)
    forwards = 0
    while True:
        logits = _block_logits(model, ids[:cur + B], B)
        forwards += 1
        block_state, block_ids = state[cur:cur + B], ids[cur:cur + B]
        # UnmaskingProcessor.__call__: a block that came in all UNMASKED is CACHED (this was its commit) ...
        if all(s == UNMASKED for s in block_state):
            # ... and DLLMStepInputs.step_decode / _update_dllm: history += B, a new block of masks.
            state[cur:cur + B] = [CACHED] * B
            cur += B
            ids += [mask_id] * B
            state += [MASKED] * B
            continue
        # FusedLogitsProcessor.__call__: repetition penalty over the generated ids (not the prompt), then
        # temperature (1 here); the unmasking scores are softmax of these logits (before top-k/top-p).
        if settings.repetition_penalty != 1.0 and generated:
            idx = torch.tensor(sorted(set(generated)))
            picked = logits[:, idx]
            logits[:, idx] = torch.where(picked < 0, picked * settings.repetition_penalty,
                                         picked / settings.repetition_penalty)
        sampled = logits.argmax(dim=-1)                                  # top_k = 1: argmax (the mask id too)
        scores = logits.softmax(dim=-1).gather(-1, sampled[:, None])[:, 0].tolist()
        # token_ids = where(dllm_mask != MASKED, input_ids, sampled)
        token_ids = [t if s != MASKED else int(v) for t, s, v in zip(block_ids, block_state, sampled.tolist())]
        block_state = _unmask(settings.remasking_strategy, block_state, scores, block=B, steps=steps,
                              threshold=settings.confidence_threshold)
        state[cur:cur + B] = block_state
        # DLLMStepInputs: masked positions go back to the mask id.
        ids[cur:cur + B] = [mask_id if s == MASKED else t for t, s in zip(token_ids, block_state)]
        if any(s != UNMASKED for s in block_state):
            continue
        # DLLMStoppingCriteria.step: the block is fully unmasked.
        num_appendable -= B
        stopped = num_appendable <= 0
        stop_pos = B - 1 + num_appendable
        # _check_stopwords_dllm: positions before output_start_pos are ignored.
        ignore = max(output_start_pos - cur, 0)
        hits = [i for i in range(B) if i >= ignore and token_ids[i] in stop_ids]
        if not stopped and hits:
            stop_pos = hits[0]
        stopped = stopped or bool(hits)
        # SchedulerSequenceDLLM._update_token_ids_decode: the block's generated tokens become valid.
        num_new = B - num_valid_ids % B
        generated += token_ids[B - num_new:]
        num_valid_ids += num_new
        if stopped:
            # SchedulerSequenceDLLM.set_stop_pos: keep the block up to stop_pos.
            generated = generated[:len(generated) - (B - stop_pos - 1)]
            # serve/core/async_engine.py generate: a trailing stop id is dropped and finishes as "stop".
            if generated and generated[-1] in stop_ids:
                return generated[:-1], "stop", forwards
            return generated, "length", forwards


def untie_head(loaded, *, std: float = 0.5, seed: int = 0):
    """Give a loaded tiny SDAR model an untied random head of ``std``, so that its confidences spread over (0, 1).

    The tied tiny model's confidences are all near 1/V and, lmdeploy not banning the mask token, its
    argmax at a mask is the mask: its outputs would be masks only.
    """
    head = loaded.model.lm_head
    weight = torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(seed)) * std
    head.weight = torch.nn.Parameter(weight.to(head.weight.device))
    return loaded
