"""The batched, cached SDAR decoder against the slow uncached reference, token for token."""

import random

import pytest
import torch

from tests.generation.sdar_reference import reference_generate
from textwm.generation.ar import ARDecoder
from textwm.generation.remasking import STRATEGIES
from textwm.generation.sdar import SDARDecoder
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
