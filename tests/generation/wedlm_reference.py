"""A slow WeDLM streaming decoder for one prompt: every step recomputes the whole sequence, no cache.

It follows the semantics in :mod:`textwm.generation.wedlm` step by step, so the batched, cached
decoder must reproduce it token for token under greedy decoding.
"""

import torch

from textwm.generation.sampling import entropy, sample


@torch.no_grad()
def reference_generate(model, prompt, *, mask_id, stop_ids, settings):
    committed: list[int] = []
    window: list[int | None] = [None] * min(settings.window_size, settings.gen_length)
    while True:
        order = [i for i, t in enumerate(window) if t is not None] + [i for i, t in enumerate(window) if t is None]
        base = len(prompt) + len(committed)
        ids = list(prompt) + committed + [mask_id if window[i] is None else window[i] for i in order]
        positions = list(range(base)) + [base + i for i in order]
        n = len(ids)
        causal = torch.ones(n, n, dtype=torch.bool).tril()[None, None]   # explicit: positions are not monotonic
        logits = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                       attention_mask=causal).logits[0, base:]
        logits[:, mask_id] = float("-inf")
        lead = 0
        while lead < len(window) and window[lead] is not None:
            lead += 1
        for tok in window[:lead]:
            if tok in stop_ids:
                return committed
            committed.append(tok)
        if len(committed) >= settings.gen_length:
            return committed
        masks = [i for i in order if window[i] is None]
        if masks:
            slots = [order.index(i) for i in masks]
            drawn = sample(logits[slots], temperature=settings.temperature)
            ent = entropy(drawn.probs).tolist()
            scores = [e + settings.position_penalty * (i - masks[0]) for i, e in zip(masks, ent)]
            chosen = [j for j, s in enumerate(scores) if s < settings.entropy_threshold]
            for j in chosen or [min(range(len(scores)), key=scores.__getitem__)]:
                window[masks[j]] = int(drawn.tokens[j])
        room = settings.gen_length - len(committed)
        window = window[lead:] + [None] * (min(settings.window_size, room) - (len(window) - lead))
