"""The batched, cached WeDLM streaming decoder against the port of Tencent/WeDLM's loop, token for token."""

import random
import runpy

import pytest
import torch

from tests.generation.wedlm_upstream import port_for, sharpen_head, upstream_generate
from textwm.config import ConfigCLI
from textwm.generation.base import Generation
from textwm.generation.decoders import make_decoder
from textwm.generation.runner import EvalGenerateConfig
from textwm.generation.sampling import logits_entropy
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder, commit_run, positions_to_fill
from textwm.models.checkpoint import CheckpointError, ModelSpec, load_model


@pytest.fixture(scope="module")
def raw_wedlm(tiny_wedlm_dir):
    """The random tiny checkpoint as saved: tied embeddings, so a mask slot mostly predicts the mask token."""
    return load_model(tiny_wedlm_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def wedlm(tiny_wedlm_dir):
    """The tiny checkpoint with an untied output head, scaled by 8 and with a mask row of 0: like a trained
    WeDLM model it rarely predicts its mask token (decoded rows hold varied tokens), and its entropies
    spread over ~[3.9, 4.9] nats at mask slots, so thresholds in that range give mixed fills.

    In float64: a batched forward and the port's single-row one differ in their reduction order, which in
    float32 moves entropies by ~1e-7 (one threshold first tried here sat 5e-7 from a score); in float64
    they agree far inside any threshold's margin."""
    lm = sharpen_head(load_model(tiny_wedlm_dir, device="cpu", dtype="float32"))
    lm.model.double()
    return lm


@pytest.fixture(scope="module")
def prompts(wedlm):
    rng = random.Random(0)
    vocab = len(wedlm.tokenizer)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8)]


# (window, entropy threshold, position penalty): 0.4 fills one mask per step, 100 all of them, the
# others a mix that depends on the entropies and on the distance to the first mask.
CASES = [(1, 0.4, 0.02), (4, 0.4, 0.02), (4, 100.0, 0.0), (8, 5.0, 0.1), (16, 4.6, 0.0), (6, 4.5, 0.01),
         (16, 4.7, 0.02)]


def settings_for(window, threshold, penalty, gen_length=11, **kw):
    return DecodeSettings(gen_length=gen_length, temperature=kw.pop("temperature", 0), window_size=window,
                          entropy_threshold=threshold, position_penalty=penalty, **kw)


def port(lm, prompt, settings, stop_ids=None, generator=None):
    return port_for(lm.model, prompt, mask_id=lm.spec.mask_token_id,
                    stop_ids=lm.spec.stop_ids if stop_ids is None else stop_ids, settings=settings, generator=generator)


def outcome(g):
    return g.token_ids, g.finish_reason, g.num_forwards


def test_a_wedlm_checkpoint_gets_the_streaming_decoder(wedlm):
    assert wedlm.spec.family == "wedlm" and wedlm.spec.mask_token_id is not None
    assert isinstance(make_decoder(wedlm.model, wedlm.spec), WeDLMDecoder)


@pytest.mark.parametrize("length", ["shorter", "equal", "longer"])
@pytest.mark.parametrize(("window", "threshold", "penalty"), CASES)
def test_greedy_batched_decoding_equals_the_upstream_port(wedlm, prompts, window, threshold, penalty, length):
    """Tokens, finish reason and forward count of every row: gen_length below, at and above the window."""
    gen_length = {"shorter": max(1, window - 3), "equal": window, "longer": window + 7}[length]
    settings = settings_for(window, threshold, penalty, gen_length=gen_length)
    got = WeDLMDecoder(wedlm.model, wedlm.spec).generate(prompts, settings)
    assert [outcome(g) for g in got] == [port(wedlm, p, settings) for p in prompts]


def test_single_prompt_decoding_equals_the_upstream_port(wedlm, prompts):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    for window, threshold, penalty in CASES[3:5]:
        settings = settings_for(window, threshold, penalty, gen_length=13)
        assert outcome(dec.generate([prompts[3]], settings)[0]) == port(wedlm, prompts[3], settings)


def test_a_row_does_not_depend_on_its_batch(wedlm, prompts):
    settings = settings_for(8, 4.6, 0.0)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    together = dec.generate(prompts, settings)
    alone = [dec.generate([p], settings)[0] for p in prompts]
    assert [outcome(g) for g in together] == [outcome(g) for g in alone]
    assert [outcome(g) for g in dec.generate(prompts[::-1], settings)[::-1]] == [outcome(g) for g in together]


def test_per_row_generation_lengths_in_one_batch(wedlm, prompts):
    """Budgets below, at and above the window in one batch of rows of different prompt lengths."""
    settings = settings_for(8, 4.6, 0.0, gen_length=12)
    budgets = [3, 12, 8, 5]
    mixed = WeDLMDecoder(wedlm.model, wedlm.spec).generate(prompts[:4], settings, gen_lengths=budgets)
    for p, g, n in zip(prompts, mixed, budgets):
        assert len(g.token_ids) == n and g.finish_reason == "length"
        assert outcome(g) == port(wedlm, p, settings_for(8, 4.6, 0.0, gen_length=n))


def test_the_budget_only_cuts_the_output(wedlm, prompts):
    """The window is not shrunk to the remaining budget (upstream): a budget of n gives the first n tokens
    of a longer run, the slots past it having been decoded all the same."""
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    for window, threshold, penalty in CASES[3:]:
        long = dec.generate(prompts, settings_for(window, threshold, penalty, gen_length=24))
        for n in (2, window - 1, window):
            short = dec.generate(prompts, settings_for(window, threshold, penalty, gen_length=n))
            assert [g.token_ids for g in short] == [g.token_ids[:n] for g in long]


#: wedlm/eval_generate.py's defaults (the paper's WeDLM settings): greedy, window 16, threshold 0.6, penalty 0.02.
PAPER = dict(window=16, threshold=0.6, penalty=0.02)


def test_the_last_window_of_a_longer_budget_as_upstream(wedlm, prompts):
    """End of the budget, upstream's rule (``wedlm_decoder.py``: the window starts as ``min(W, kv_budget)`` masks and
    each refill appends ``min(run, kv_budget)``, ``kv_budget`` being free cache memory, never the tokens left;
    ``_process_pruned_tokens`` ends the row once ``max_tokens`` are committed): with 40 tokens and a window of 16 the
    last forwards still carry masks past token 40, which take part in the fill choice; what the budget does is cut
    the committed run. Nothing still masked or filled past the leading run is committed at the limit.

    At the paper's settings one mask is filled a step, the lowest entropy + 0.02 * distance, so a mask past the budget
    can win the step: with the window shrunk to the tokens left, prompt 5 differs from token 30 on (and spends 42
    forwards, not 45)."""
    settings = settings_for(PAPER["window"], PAPER["threshold"], PAPER["penalty"], gen_length=40)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    batched = dec.generate(prompts, settings)
    assert [outcome(g) for g in batched] == [port(wedlm, p, settings) for p in prompts]
    assert [outcome(dec.generate([p], settings)[0]) for p in prompts] == [outcome(g) for g in batched]
    assert all(len(g.token_ids) == 40 and g.finish_reason == "length" for g in batched)
    assert batched[5].num_forwards == 45
    longer = dec.generate(prompts, settings_for(PAPER["window"], PAPER["threshold"], PAPER["penalty"], gen_length=56))
    assert [g.token_ids for g in batched] == [g.token_ids[:40] for g in longer]


def test_commit_at_the_budget_and_at_a_stop_id():
    """``_process_pruned_tokens`` + ``Scheduler.postprocess`` on one committed run, hand-computed (stop id 9)."""
    def commit(run, budget, before=()):
        g = Generation(token_ids=list(before), finish_reason="length")
        return commit_run(g, run, budget, {9}), g.token_ids, g.finish_reason

    assert commit([1, 2, 3], 5, before=[7]) == (False, [7, 1, 2, 3], "length")    # under the budget: all of it
    assert commit([1, 2, 3, 4], 3) == (True, [1, 2, 3], "length")                   # the run past the budget is cut
    assert commit([1, 2, 3, 9], 3) == (True, [1, 2, 3], "length")                   # a stop id past the budget: unseen
    assert commit([1, 9, 3, 4], 3) == (True, [1], "stop")        # a stop id ends the row; what follows it is dropped
    assert commit([1, 2, 9], 3) == (True, [1, 2], "stop")        # the budget-th token a stop id: "stop" (upstream
    #                                                              returns the 3 ids, the stop id last)


def test_a_stop_id_reached_mid_window(wedlm, prompts):
    """A committed run is cut at its stop id; upstream keeps the id as the last output token, we drop it."""
    settings = settings_for(4, 100.0, 0.0, gen_length=20)   # every step fills the window: runs of 4
    no_stop = ModelSpec(**{**wedlm.spec.__dict__, "stop_ids": ()})
    first = WeDLMDecoder(wedlm.model, no_stop).generate(prompts[:1], settings)[0].token_ids
    cut = next(i for i in range(4, len(first)) if i % 4 and first[i] not in first[:i])   # inside a run, first seen
    stop = first[cut]
    spec = ModelSpec(**{**wedlm.spec.__dict__, "stop_ids": (stop,)})
    out = WeDLMDecoder(wedlm.model, spec).generate(prompts, settings)
    assert outcome(out[0]) == (first[:cut], "stop", 1 + cut // 4 + 2)
    for p, g in zip(prompts, out):
        assert outcome(g) == port(wedlm, p, settings, stop_ids=(stop,))
    upstream_ids, _ = upstream_generate(wedlm.model, prompts[0], mask_id=spec.mask_token_id, stop_ids=(stop,),
                                        window_size=4, max_tokens=20, temperature=0, entropy_threshold=100.0,
                                        pos_penalty=0.0)
    assert upstream_ids == [*first[:cut], stop]


def test_forward_counts_follow_the_refill_before_the_forward(wedlm):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    # Threshold above any entropy: step 1 fills the 4 masks; each later forward carries that run plus 4
    # new masks, commits the run and fills the masks: 8 tokens = prefill + 3 forwards.
    wide = dec.generate([[11, 12, 13]], settings_for(4, 100.0, 0.0, gen_length=8))[0]
    assert len(wide.token_ids) == 8 and wide.num_forwards == 1 + 3
    # A window of one slot: after the first fill, every forward commits one token and fills the next.
    narrow = dec.generate([[11, 12, 13]], settings_for(1, 0.4, 0.02, gen_length=8))[0]
    assert narrow.num_forwards == 1 + 8 + 1
    # One fill per step at the first mask (threshold below any entropy, a penalty above their spread):
    # the first mask sees what a window of one sees, so any window decodes like it.
    first_mask = dec.generate([[11, 12, 13]], settings_for(16, 0.4, 2.0, gen_length=8))[0]
    assert outcome(first_mask) == outcome(narrow)


def test_positions_to_fill_hand_computed():
    masks = [1, 2, 5]                                   # window indices of the masks
    ent = [0.5, 0.1, 0.0]
    assert positions_to_fill(ent, masks, 0.3, 0.0) == [1, 2]
    assert positions_to_fill(ent, masks, 0.3, 0.1) == [1]          # 0.1 + 0.1*1 < 0.3; 0.0 + 0.1*4 is not
    assert positions_to_fill(ent, masks, 0.05, 0.1) == [1]         # none below: the lowest score (0.2)
    assert positions_to_fill([0.2, 0.2], [0, 1], 0.0, 0.0) == [0]  # a tie: the first


def test_seeded_sampling_equals_the_upstream_port(wedlm, prompts):
    """Temperature > 0 with top-k / top-p: one row, the same generator seed in both."""
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    for kw in (dict(temperature=1.0, top_p=0.9), dict(temperature=0.7, top_p=0.8, top_k=20),
               dict(temperature=0.2)):
        settings = settings_for(8, 4.6, 0.0, gen_length=10, seed=3, **kw)
        for p in prompts[:3]:
            assert outcome(dec.generate([p], settings)[0]) == port(wedlm, p, settings,
                                                                   generator=torch.Generator().manual_seed(3))


def test_fill_decisions_use_the_entropy_of_the_raw_logits(wedlm, prompts):
    """At temperature 0.05 the sampling distribution's entropy is below 2 nats, the raw logits' above 3.5:
    with threshold 2, one mask per step is filled (the raw entropy decides)."""
    mask = wedlm.spec.mask_token_id
    ids = torch.tensor([prompts[0] + [mask] * 8])
    with torch.no_grad():
        logits = wedlm.model(input_ids=ids).logits[0, len(prompts[0]):]
    assert logits_entropy(logits / 0.05).max() < 2.0 < logits_entropy(logits).min()
    settings = settings_for(8, 2.0, 0.0, gen_length=10, temperature=0.05, seed=5)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    for p in prompts[:3]:
        got = dec.generate([p], settings)[0]
        assert got.num_forwards >= 1 + 10 + 1    # one fill per forward (entropies of the sampling
        # distribution would fill the whole window at once: 1 + 3 forwards)
        assert outcome(got) == port(wedlm, p, settings, generator=torch.Generator().manual_seed(5))


def test_the_mask_token_is_not_banned_as_upstream(raw_wedlm, prompts):
    """Upstream scores and samples the raw logits: a model that predicts its mask token emits it."""
    settings = settings_for(4, 100.0, 0.0, gen_length=12)
    got = WeDLMDecoder(raw_wedlm.model, raw_wedlm.spec).generate(prompts, settings)
    assert any(raw_wedlm.spec.mask_token_id in g.token_ids for g in got)
    assert [outcome(g) for g in got] == [port(raw_wedlm, p, settings) for p in prompts]


def test_sampling_is_reproducible_with_a_seed(wedlm, prompts):
    settings = DecodeSettings(gen_length=8, temperature=1.0, top_p=0.9, window_size=4, seed=7)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    a, b = dec.generate(prompts, settings), dec.generate(prompts, settings)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_bad_settings_and_checkpoints(wedlm, tiny_ar_dir):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    with pytest.raises(ValueError, match="empty prompt"):
        dec.generate([[]], DecodeSettings())
    with pytest.raises(ValueError, match="window_size must be >= 1"):
        DecodeSettings(window_size=0)
    ar = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    with pytest.raises(CheckpointError, match="no mask_token_id"):
        WeDLMDecoder(ar.model, ar.spec)


def test_wedlm_eval_generate_defaults_to_the_papers_script(repo):
    """wedlm/eval_generate.py decodes with the paper's wedlm/eval_generate.py defaults (greedy, window 16,
    entropy threshold 0.6) unless told otherwise; the shared default (sdar/eval_generate.py, DecodeSettings)
    stays 1.0."""
    script = runpy.run_path(str(repo / "wedlm" / "eval_generate.py"))
    required = ["--model-path", "m", "--data-dir", "d", "--datasets", "test", "--output-dir", "o"]
    config, _ = ConfigCLI(script["WeDLMEvalGenerateConfig"]).parse(required)
    assert config.decode.temperature == 0.0 and config.decode.window_size == 16
    assert config.decode.entropy_threshold == 0.6
    assert ConfigCLI(script["WeDLMEvalGenerateConfig"]).parse([*required, "--temperature", "0.2"])[0].decode.temperature == 0.2
    assert ConfigCLI(EvalGenerateConfig).parse(required)[0].decode.temperature == DecodeSettings().temperature == 1.0


def test_unwritten_cache_slots_hold_zeros_not_garbage():
    """A short row's masked-but-unwritten slots are read by attention; garbage there (NaN) poisoned rows at
    random, so the buffers are zero-filled (``grow_kv_buffers``)."""
    from textwm.generation.base import grow_kv_buffers

    keys, values = [], []
    grow_kv_buffers(keys, values, torch.ones(2, 1, 3, 4), torch.ones(2, 1, 3, 5), 0, capacity=64)
    assert keys[0].shape == (2, 1, 64, 4) and values[0].shape == (2, 1, 64, 5)
    assert not keys[0].any() and not values[0].any()
