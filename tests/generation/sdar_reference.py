"""A slow SDAR decoder that recomputes everything without a cache, one prompt at a time.

It follows the reference semantics literally (JetAstra/SDAR ``block_diffusion_generate`` with the
differences from the paper's harness that sdar/README.md lists under "Decoder") and shares only the
sampling and strategy functions, which have their own hand-computed tests. The batched, cached decoder must match it token for token (greedy).
"""

import math

import torch

from textwm.generation.remasking import select_transfer, transfer_schedule
from textwm.generation.sampling import apply_repetition_penalty, entropy, sample


@torch.no_grad()
def reference_generate(model, prompt, *, mask_id, stop_ids, settings):
    blk = settings.block_length
    length = len(prompt)
    end = math.ceil((length + settings.gen_length) / blk) * blk
    x = list(prompt)
    cur = (length // blk) * blk
    while cur < end:
        block = x[cur:] + [mask_id] * (blk - (len(x) - cur))
        for step_k in transfer_schedule(blk, settings.denoising_steps):
            is_mask = torch.tensor([t == mask_id for t in block])[None]
            if not is_mask.any():
                break
            seq = torch.tensor(x[:cur] + block)[None]
            n = seq.shape[1]
            blocks = torch.arange(n) // blk
            attn = (blocks[None, :] <= blocks[:, None])[None, None]   # block-causal, bidirectional inside a block
            logits = model(input_ids=seq, position_ids=torch.arange(n)[None], attention_mask=attn).logits[:, cur:]
            context = [t for t in x[:cur] + block if t != mask_id]
            seen = torch.zeros(1, logits.shape[-1], dtype=torch.bool)
            seen[0, context] = True
            logits = apply_repetition_penalty(logits, seen, settings.repetition_penalty)
            logits[..., mask_id] = float("-inf")
            s = sample(logits.reshape(-1, logits.shape[-1]), temperature=settings.temperature, top_k=settings.top_k,
                       top_p=settings.top_p)
            ent = entropy(s.probs)[None] if settings.remasking_strategy == "entropy_bounded" else None
            k = torch.clamp(is_mask.sum(dim=-1), max=step_k)
            transfer = select_transfer(settings.remasking_strategy, is_mask, s.confidence[None], k,
                                       confidence_threshold=settings.confidence_threshold, entropy=ent,
                                       entropy_budget=settings.entropy_budget)[0]
            block = [int(t) if f else b for t, f, b in zip(s.tokens.tolist(), transfer.tolist(), block)]
        x = x[:cur] + block
        if any(t in stop_ids for t in x[length:]):
            break
        cur += blk
    out = []
    for t in x[length:]:
        if t in stop_ids or t == mask_id:
            break
        out.append(t)
    return out
