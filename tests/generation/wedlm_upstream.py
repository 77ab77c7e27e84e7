"""A slow, single-row port of Tencent/WeDLM's streaming decoding loop, the reference of the WeDLM decoder tests.

Written from upstream's control flow (``wedlm/engine/``), one prompt, no KV cache, no batching:

* ``LLMEngine.step`` / ``Scheduler``: one prefill, then one decode forward per step until the
  sequence is finished;
* ``WeDLMDecoder.init_wedlm_state``: the window starts as ``wedlm_window_size`` masks (upstream caps
  it at the sequence's ``kv_budget``, a memory limit of at least twice the window: ample here);
* ``WeDLMDecoder.prepare_decode_inputs`` -> ``_refill_window_masks``: BEFORE each forward, as many
  masks as the window's leading run of filled slots are appended;
* ``_prepare_window_inputs``: filled slots first, then masks, each at ``current_seq_len + index``;
  the attention is causal by that physical order (``layers/attention.py``: ``flash_attn_varlen_func``
  with ``causal=True``). Without a cache the committed prefix is recomputed left to right, which is
  what upstream's cache holds for it;
* ``process_decode_outputs`` -> ``_process_pruned_tokens`` and ``Scheduler.postprocess``: the leading
  filled run is committed; the output ends at the first stop id (kept in the output, as upstream
  does) or at ``max_tokens`` (the excess of the run is cut);
* ``Sampler.process_mask_positions``: the logits are raw (``ModelRunner.run_model``: no token is
  banned, the mask token included); entropy on them (``compute_entropy``:
  ``Categorical(logits=...)``); tokens by ``sample_tokens`` (greedy at temperature 0; otherwise
  top-k, then top-p on the unscaled logits, then temperature); positions by
  ``select_positions_to_fill`` (entropy + penalty * distance to the first mask < threshold, or the
  single lowest).

Returns upstream's completion ids (a stop id stays as the last token) and the decode-forward count;
:func:`as_generation` turns them into our decoder's convention.
"""

from __future__ import annotations

import torch


def refill_window_masks(state: dict) -> None:
    """``WeDLMDecoder._refill_window_masks``: append one mask per leading filled slot."""
    flags = state["mask_flags"]
    prefix_len = flags.index(True) if True in flags else len(flags)
    state["tokens"] += [state["mask_id"]] * prefix_len
    state["mask_flags"] += [True] * prefix_len


def window_inputs(state: dict) -> tuple[list[int], list[int], int]:
    """``WeDLMDecoder._prepare_window_inputs``: (tokens, positions, number of filled slots), filled slots first."""
    non_mask = [i for i, f in enumerate(state["mask_flags"]) if not f]
    masks = [i for i, f in enumerate(state["mask_flags"]) if f]
    order = non_mask + masks
    return ([state["tokens"][i] for i in order], [state["seq_len"] + i for i in order], len(non_mask))


def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``Sampler._apply_top_k``."""
    if k <= 0:
        return logits
    kth = torch.topk(logits, min(k, logits.size(-1)), dim=-1).values[..., -1, None]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """``Sampler._apply_top_p``: keep the top tokens up to and including the one whose cumulative prob crosses p."""
    if p >= 1.0:
        return logits
    sorted_logits, sorted_idx = torch.sort(logits, descending=True, dim=-1)
    remove = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1) > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))


def sample_tokens(logits: torch.Tensor, temperature: float, p: float, k: int,
                  generator: torch.Generator | None) -> torch.Tensor:
    """``Sampler.sample_tokens``: greedy at temperature 0, else top-k -> top-p -> /temperature -> multinomial."""
    greedy = torch.softmax(logits, dim=-1).argmax(dim=-1)
    if temperature == 0:
        return greedy
    probs = torch.softmax(top_p(top_k(logits, k), p) / temperature, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def select_positions_to_fill(entropy: torch.Tensor, mask_indices: list[int], threshold: float | None,
                             penalty: float) -> list[int]:
    """``Sampler.select_positions_to_fill``: indices into ``mask_indices``."""
    idx = torch.tensor(mask_indices, dtype=torch.float)
    adjusted = entropy + (idx - idx[0]) * penalty
    if threshold is not None:
        candidates = (adjusted < threshold).nonzero(as_tuple=True)[0]
        if candidates.numel() > 0:
            return candidates.tolist()
    return [int(adjusted.argmin().item())]


def prune(state: dict, count: int, stop_ids: set[int], max_tokens: int, output: list[int]) -> None:
    """``_process_pruned_tokens`` + ``Scheduler.postprocess``: commit the leading ``count`` tokens."""
    pruned, state["tokens"], state["mask_flags"] = (state["tokens"][:count], state["tokens"][count:],
                                                    state["mask_flags"][count:])
    for t in pruned:
        state["seq_len"] += 1
        output.append(t)
        if t in stop_ids or len(output) >= max_tokens:
            state["finished"] = True
            return


@torch.no_grad()
def upstream_generate(model, prompt: list[int], *, mask_id: int, stop_ids, window_size: int, max_tokens: int,
                      temperature: float, entropy_threshold: float | None, pos_penalty: float, top_p_: float = 1.0,
                      top_k_: int = 0, generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """One prompt decoded as upstream decodes it: ``(completion ids, decode forwards)``."""
    stop_ids = set(stop_ids or ())
    state = {"mask_id": mask_id, "tokens": [mask_id] * window_size, "mask_flags": [True] * window_size,
             "seq_len": len(prompt), "finished": False}
    output: list[int] = []
    forwards = 0
    while not state["finished"]:
        refill_window_masks(state)
        window_ids, window_pos, num_non_mask = window_inputs(state)
        ids = list(prompt) + output + window_ids
        positions = list(range(state["seq_len"])) + window_pos
        causal = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()[None, None]  # by physical order
        logits = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                       attention_mask=causal).logits[0, state["seq_len"]:].float()
        forwards += 1
        flags = state["mask_flags"]
        prune(state, flags.index(True) if True in flags else len(flags), stop_ids, max_tokens, output)
        masks = [i for i, f in enumerate(state["mask_flags"]) if f]
        if masks and not state["finished"]:
            mask_logits = logits[num_non_mask:]
            entropy = torch.distributions.Categorical(logits=mask_logits).entropy()
            sampled = sample_tokens(mask_logits, temperature, top_p_, top_k_, generator)
            for j in select_positions_to_fill(entropy, masks, entropy_threshold, pos_penalty):
                state["tokens"][masks[j]] = int(sampled[j])
                state["mask_flags"][masks[j]] = False
    return output, forwards


def as_generation(output: list[int], stop_ids) -> tuple[list[int], str]:
    """Upstream's ids in our decoder's convention: the tokens before the first stop id, and why it ended."""
    for i, t in enumerate(output):
        if t in set(stop_ids or ()):
            return output[:i], "stop"
    return output, "length"


def port_for(model, prompt, *, mask_id, stop_ids, settings, generator=None) -> tuple[list[int], str, int]:
    """:func:`upstream_generate` with our ``DecodeSettings``: ``(token ids, finish reason, forwards incl. prefill)``."""
    output, forwards = upstream_generate(
        model, prompt, mask_id=mask_id, stop_ids=stop_ids, window_size=settings.window_size,
        max_tokens=settings.gen_length, temperature=settings.temperature, entropy_threshold=settings.entropy_threshold,
        pos_penalty=settings.position_penalty, top_p_=settings.top_p, top_k_=settings.top_k, generator=generator)
    tokens, reason = as_generation(output, stop_ids)
    return tokens, reason, forwards + 1


def sharpen_head(lm):
    """Give a loaded tiny WeDLM model an untied output head, scaled by 8 and with a mask row of 0.

    Like a trained WeDLM model it then rarely predicts its mask token (decoded rows hold varied tokens),
    and its entropies spread over ~[3.9, 4.9] nats at mask slots, so thresholds in that range give
    mixed fills. Returns ``lm`` (changed in place).
    """
    head = torch.nn.Linear(lm.model.config.hidden_size, lm.model.config.vocab_size, bias=False)
    with torch.no_grad():
        head.weight.copy_(lm.model.lm_head.weight * 8)
        head.weight[lm.spec.mask_token_id] = 0.0
    lm.model.lm_head = head.to(lm.model.lm_head.weight.device)
    lm.model.config.tie_word_embeddings = False
    return lm
