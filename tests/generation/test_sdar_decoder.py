"""The batched, cached SDAR decoder against the slow uncached references, token for token.

``generate`` rules against ``sdar_reference.py``; ``lmdeploy`` rules against ``lmdeploy_reference.py``.
"""

import dataclasses
import random

import pytest
import torch

from tests.generation.lmdeploy_reference import lmdeploy_reference, untie_head
from tests.generation.sdar_reference import reference_generate
from textwm.generation.ar import ARDecoder
from textwm.generation.remasking import STRATEGIES
from textwm.generation.sdar import SDARDecoder, expected_blocks
from textwm.generation.sdar_lmdeploy import block_stops, denoise_num, lmdeploy_unmask
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import CheckpointError, ModelSpec, load_model


@pytest.fixture(scope="module")
def sdar(tiny_sdar_dir):
    return load_model(tiny_sdar_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(sdar):
    rng = random.Random(0)
    vocab = len(sdar.tokenizer)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8)]


CASES = [(1, 1), (4, 1), (4, 2), (4, 4), (8, 3), (8, 8)]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("block", "steps"), CASES)
def test_batched_cached_decoding_equals_reference(sdar, prompts, strategy, block, steps):
    settings = DecodeSettings(gen_length=11, temperature=0, block_length=block, denoising_steps=steps,
                              remasking_strategy=strategy, confidence_threshold=0.05, entropy_budget=1.5)
    got = SDARDecoder(sdar.model, sdar.spec).generate(prompts, settings)
    for p, g in zip(prompts, got):
        ref = reference_generate(sdar.model, p, mask_id=sdar.spec.mask_token_id, stop_ids=sdar.spec.stop_ids,
                                 settings=settings)
        assert g.token_ids == ref
        assert sdar.spec.mask_token_id not in g.token_ids


@pytest.mark.parametrize("strategy", ["low_confidence_dynamic", "sequential"])
def test_repetition_penalty_equals_reference(sdar, prompts, strategy):
    settings = DecodeSettings(gen_length=13, temperature=0, block_length=4, denoising_steps=2,
                              remasking_strategy=strategy, repetition_penalty=1.8, confidence_threshold=0.05)
    got = SDARDecoder(sdar.model, sdar.spec).generate(prompts, settings)
    plain = SDARDecoder(sdar.model, sdar.spec).generate(prompts, DecodeSettings(
        gen_length=13, temperature=0, block_length=4, denoising_steps=2, remasking_strategy=strategy,
        confidence_threshold=0.05))
    assert [g.token_ids for g in got] != [g.token_ids for g in plain]  # the penalty changes the output
    for p, g in zip(prompts, got):
        assert g.token_ids == reference_generate(sdar.model, p, mask_id=sdar.spec.mask_token_id,
                                                 stop_ids=sdar.spec.stop_ids, settings=settings)


def test_per_row_generation_lengths(sdar, prompts):
    settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2)
    dec = SDARDecoder(sdar.model, sdar.spec)
    mixed = dec.generate(prompts[:3], settings, gen_lengths=[4, 12, 7])
    for p, g, n in zip(prompts[:3], mixed, [4, 12, 7]):
        alone = dec.generate([p], DecodeSettings(gen_length=n, temperature=0, block_length=4, denoising_steps=2))[0]
        assert g.token_ids == alone.token_ids


def test_a_row_does_not_depend_on_its_batch(sdar, prompts):
    settings = DecodeSettings(gen_length=9, temperature=0, block_length=4, denoising_steps=2)
    dec = SDARDecoder(sdar.model, sdar.spec)
    together = dec.generate(prompts, settings)
    alone = [dec.generate([p], settings)[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    reversed_batch = dec.generate(prompts[::-1], settings)[::-1]
    assert [g.token_ids for g in together] == [g.token_ids for g in reversed_batch]


def test_generation_stops_after_the_block_with_a_stop_id(sdar, prompts):
    settings = DecodeSettings(gen_length=24, temperature=0, block_length=4, denoising_steps=4)
    first = SDARDecoder(sdar.model, sdar.spec).generate(prompts[:1], settings)[0]
    stop = first.token_ids[6]
    spec = ModelSpec(**{**sdar.spec.__dict__, "stop_ids": (stop,)})
    out = SDARDecoder(sdar.model, spec).generate(prompts, settings)
    for p, g in zip(prompts, out):
        ref = reference_generate(sdar.model, p, mask_id=spec.mask_token_id, stop_ids=(stop,), settings=settings)
        assert g.token_ids == ref and stop not in g.token_ids
    assert out[0].finish_reason == "stop" and out[0].token_ids == first.token_ids[: first.token_ids.index(stop)]


def test_length_and_forward_counts(sdar):
    prompt = [[11, 12, 13, 14, 15]]                 # 1 full block of 4, tail of 1
    dec = SDARDecoder(sdar.model, sdar.spec)
    one = dec.generate(prompt, DecodeSettings(gen_length=8, temperature=0, block_length=4, denoising_steps=1))[0]
    four = dec.generate(prompt, DecodeSettings(gen_length=8, temperature=0, block_length=4, denoising_steps=4))[0]
    # ends at the first block boundary >= 5 + 8 = 13 -> 16: 11 generated tokens; blocks 1..3
    assert len(one.token_ids) == 11 and one.finish_reason == "length"
    # 1 prefill + per block (scratch steps + commit), no commit after the last block
    assert one.num_forwards == 1 + 3 * 1 + 2
    assert four.num_forwards == 1 + (3 + 4 + 4) + 2   # the first block has 3 masks: 3 steps


def test_sampling_is_reproducible_with_a_seed(sdar, prompts):
    settings = DecodeSettings(gen_length=8, temperature=1.0, top_p=0.9, block_length=4, denoising_steps=2, seed=7)
    dec = SDARDecoder(sdar.model, sdar.spec)
    a, b = dec.generate(prompts, settings), dec.generate(prompts, settings)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(sdar.spec.mask_token_id not in g.token_ids for g in a)


def test_bad_settings_and_checkpoints(sdar, tiny_ar_dir):
    dec = SDARDecoder(sdar.model, sdar.spec)
    with pytest.raises(CheckpointError, match="block length 3 does not divide the model's block_size 8"):
        dec.generate([[1, 2, 3]], DecodeSettings(block_length=3))
    with pytest.raises(ValueError, match="empty prompt"):
        dec.generate([[]], DecodeSettings())
    with pytest.raises(ValueError, match="unknown remasking strategy"):
        DecodeSettings(remasking_strategy="best")
    ar = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    with pytest.raises(CheckpointError, match="no mask_token_id"):
        SDARDecoder(ar.model, ar.spec)


def test_ar_decoder_left_padding_equals_unbatched_greedy(tiny_ar_dir, prompts):
    ar = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    dec = ARDecoder(ar.model, ar.spec, pad_token_id=ar.tokenizer.pad_token_id)
    settings = DecodeSettings(gen_length=7, temperature=0)
    batched = dec.generate(prompts, settings)
    for p, g in zip(prompts, batched):
        ids = torch.tensor([p])
        for _ in range(7):
            nxt = ar.model(ids).logits[0, -1].argmax().item()
            if nxt in ar.spec.stop_ids:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        assert g.token_ids == ids[0, len(p):].tolist()


# --- sdar_rules="lmdeploy": lmdeploy's dllm rules against the slow single-row port ----------------------

LMDEPLOY_CASES = [  # (block, steps, strategy, threshold); the paper's flags first
    (8, 1, "low_confidence_dynamic", 0.85), (8, 1, "low_confidence_dynamic", 0.5), (4, 1, "low_confidence_dynamic", 0.3),
    (2, 2, "low_confidence_dynamic", 0.5), (4, 4, "low_confidence_dynamic", 0.99), (16, 1, "low_confidence_dynamic", 0.5),
    (8, 1, "low_confidence_static", 0.85), (8, 3, "low_confidence_static", 0.85), (4, 2, "low_confidence_static", 0.85),
    (2, 4, "low_confidence_static", 0.85), (8, 2, "sequential", 0.85), (4, 1, "sequential", 0.85),
    (2, 2, "sequential", 0.85), (8, 3, "sequential", 0.85),
]


@pytest.fixture(scope="module")
def confident(tiny_sdar_dir):
    """Untied head (confidences spread over (0, 1)), in float64 so that batched and single-row forwards
    agree far inside the margin of any confidence threshold (see the WeDLM decoder tests)."""
    lm = untie_head(load_model(tiny_sdar_dir, device="cpu", dtype="float32"))
    lm.model.double()
    return lm


@pytest.fixture(scope="module")
def lm_prompts(sdar):
    rng = random.Random(0)
    vocab = len(sdar.tokenizer)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8, 16, 1)]


def _lmdeploy(**kw):
    return DecodeSettings(**{"sdar_rules": "lmdeploy", "temperature": 0, "gen_length": 13, **kw})


def _assert_port(loaded, prompts, got, settings, spec=None, gen_lengths=None):
    spec = spec or loaded.spec
    for i, (p, g) in enumerate(zip(prompts, got)):
        s = settings if gen_lengths is None else dataclasses.replace(settings, gen_length=gen_lengths[i])
        ref = lmdeploy_reference(loaded.model, p, mask_id=spec.mask_token_id, stop_ids=spec.stop_ids, settings=s)
        assert (g.token_ids, g.finish_reason, g.num_forwards) == ref, f"row {i} (prompt of {len(p)})"


@pytest.mark.parametrize(("block", "steps", "strategy", "threshold"), LMDEPLOY_CASES)
def test_lmdeploy_rules_equal_the_port(confident, lm_prompts, block, steps, strategy, threshold):
    settings = _lmdeploy(block_length=block, denoising_steps=steps, remasking_strategy=strategy,
                         confidence_threshold=threshold)
    got = SDARDecoder(confident.model, confident.spec).generate(lm_prompts, settings)
    _assert_port(confident, lm_prompts, got, settings)
    assert all(len(g.token_ids) == 13 or g.finish_reason == "stop" for g in got)   # max_tokens: an exact cap


def test_lmdeploy_rules_on_the_tied_tiny_model_produce_the_unbanned_mask_token(sdar, lm_prompts):
    settings = _lmdeploy(block_length=4, denoising_steps=2, remasking_strategy="low_confidence_static")
    got = SDARDecoder(sdar.model, sdar.spec).generate(lm_prompts, settings)
    _assert_port(sdar, lm_prompts, got, settings)
    assert any(sdar.spec.mask_token_id in g.token_ids for g in got)   # lmdeploy never bans it


def test_lmdeploy_per_row_generation_lengths(confident, lm_prompts):
    lengths = [4, 12, 7, 1, 13, 9, 2, 5]
    settings = _lmdeploy(block_length=8, denoising_steps=1)
    got = SDARDecoder(confident.model, confident.spec).generate(lm_prompts, settings, gen_lengths=lengths)
    _assert_port(confident, lm_prompts, got, settings, gen_lengths=lengths)
    assert all(len(g.token_ids) == n or g.finish_reason == "stop" for g, n in zip(got, lengths))


def test_lmdeploy_stop_ids_and_the_ignored_first_block(confident, lm_prompts):
    settings = _lmdeploy(block_length=8, denoising_steps=1, gen_length=24)
    first = SDARDecoder(confident.model, confident.spec).generate(lm_prompts, settings)
    stop = first[0].token_ids[0]               # prompt of 5: made in the block holding the prompt's tail
    spec = ModelSpec(**{**confident.spec.__dict__, "stop_ids": (stop,)})
    got = SDARDecoder(confident.model, spec).generate(lm_prompts, settings)
    _assert_port(confident, lm_prompts, got, settings, spec=spec)
    assert got[0].token_ids[0] == stop         # lmdeploy checks no stop id in that block
    stopped = [g for g in got if g.finish_reason == "stop"]
    assert stopped and all(len(g.token_ids) < 24 for g in stopped)


def test_lmdeploy_repetition_penalty_counts_generated_tokens_only(confident, lm_prompts):
    settings = _lmdeploy(block_length=4, denoising_steps=1, repetition_penalty=1.3, confidence_threshold=0.5)
    dec = SDARDecoder(confident.model, confident.spec)
    got = dec.generate(lm_prompts, settings)
    _assert_port(confident, lm_prompts, got, settings)
    plain = dec.generate(lm_prompts, dataclasses.replace(settings, repetition_penalty=1.0))
    assert [g.token_ids for g in got] != [g.token_ids for g in plain]


def test_the_papers_flags_take_more_forwards_under_lmdeploy_rules(confident, lm_prompts):
    paper = DecodeSettings(gen_length=16, temperature=0, block_length=8, denoising_steps=1)   # dynamic, 0.85
    dec = SDARDecoder(confident.model, confident.spec)
    ours = dec.generate(lm_prompts, paper)
    theirs = dec.generate(lm_prompts, dataclasses.replace(paper, sdar_rules="lmdeploy"))
    for p, a, b in zip(lm_prompts, ours, theirs):
        blocks = expected_blocks(len(p), 16, 8)
        assert a.num_forwards == 1 + blocks + (blocks - 1)   # the batch's prefill, 1 scratch + 1 commit a block
        assert b.num_forwards > a.num_forwards


def test_lmdeploy_unmasking_rules_by_hand():
    masked = torch.tensor([[False, True, True, True]])
    conf = torch.tensor([[0.9, 0.2, 0.7, 0.6]])
    pick = lambda strategy, **kw: lmdeploy_unmask(strategy, masked, conf, **{"num": 2, "threshold": 0.85, **kw})[0].tolist()  # noqa: E731
    assert pick("low_confidence_dynamic", threshold=0.65) == [False, False, True, False]
    assert pick("low_confidence_dynamic", threshold=0.6) == [False, False, True, True]      # >= the threshold
    assert pick("low_confidence_dynamic", threshold=0.95) == [False, False, True, False]    # always the best
    assert pick("low_confidence_static") == [False, False, True, True]
    assert pick("sequential") == [False, True, True, False]
    tail = torch.tensor([[False, False, False, True]])
    assert lmdeploy_unmask("sequential", tail, conf, num=2, threshold=0.85)[0].tolist() == [False] * 3 + [True]
    assert (denoise_num(8, 1), denoise_num(8, 3), denoise_num(4, 8)) == (8, 2, 1)
    with pytest.raises(ValueError, match="lmdeploy has no unmasking strategy"):
        lmdeploy_unmask("entropy_bounded", masked, conf, num=1, threshold=0.5)


def test_lmdeploy_stop_rules_by_hand():
    block, stops = torch.tensor([[5, 9, 5, 3]] * 3), torch.tensor([5])
    stopped, end = block_stops(block, torch.tensor([1, 1, -1]), torch.tensor([False, True, False]), stops)
    assert stopped.tolist() == [True, False, True]
    assert end.tolist() == [1, 4, 3]           # after the first stop id; none seen; the length wins


def test_lmdeploy_rules_sample_reproducibly_and_refuse_other_strategies(confident, lm_prompts):
    settings = _lmdeploy(block_length=4, denoising_steps=1, temperature=1.0, top_k=20, top_p=0.9, seed=3)
    dec = SDARDecoder(confident.model, confident.spec)
    assert [g.token_ids for g in dec.generate(lm_prompts, settings)] == \
        [g.token_ids for g in dec.generate(lm_prompts, settings)]
    with pytest.raises(ValueError, match="lmdeploy has no strategy 'entropy_bounded'"):
        dec.generate(lm_prompts, _lmdeploy(remasking_strategy="entropy_bounded"))
