"""The batched, cached WeDLM streaming decoder against the slow uncached reference, token for token."""

import random

import pytest

from tests.generation.wedlm_reference import reference_generate
from textwm.generation.decoders import make_decoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import CheckpointError, ModelSpec, load_model


@pytest.fixture(scope="module")
def wedlm(tiny_wedlm_dir):
    return load_model(tiny_wedlm_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(wedlm):
    rng = random.Random(0)
    vocab = len(wedlm.tokenizer)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8)]


# (window, entropy threshold, position penalty): one fill per step, all masks per step, and mixes.
CASES = [(1, 0.4, 0.02), (4, 0.4, 0.02), (4, 100.0, 0.0), (8, 6.2, 0.3), (16, 100.0, 0.02), (16, 6.0, 0.1)]


def settings_for(window, threshold, penalty, gen_length=11, **kw):
    return DecodeSettings(gen_length=gen_length, temperature=0, window_size=window, entropy_threshold=threshold,
                          position_penalty=penalty, **kw)


def test_a_wedlm_checkpoint_gets_the_streaming_decoder(wedlm):
    assert wedlm.spec.family == "wedlm" and wedlm.spec.mask_token_id is not None
    assert isinstance(make_decoder(wedlm.model, wedlm.spec), WeDLMDecoder)


@pytest.mark.parametrize(("window", "threshold", "penalty"), CASES)
def test_batched_cached_decoding_equals_reference(wedlm, prompts, window, threshold, penalty):
    settings = settings_for(window, threshold, penalty)
    got = WeDLMDecoder(wedlm.model, wedlm.spec).generate(prompts, settings)
    for p, g in zip(prompts, got):
        ref = reference_generate(wedlm.model, p, mask_id=wedlm.spec.mask_token_id, stop_ids=wedlm.spec.stop_ids,
                                 settings=settings)
        assert g.token_ids == ref
        assert wedlm.spec.mask_token_id not in g.token_ids


def test_a_row_does_not_depend_on_its_batch(wedlm, prompts):
    settings = settings_for(8, 6.2, 0.3)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    together = dec.generate(prompts, settings)
    alone = [dec.generate([p], settings)[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.token_ids for g in dec.generate(prompts[::-1], settings)[::-1]] == [g.token_ids for g in together]


def test_per_row_generation_lengths(wedlm, prompts):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    mixed = dec.generate(prompts[:3], settings_for(4, 6.2, 0.3, gen_length=12), gen_lengths=[4, 12, 7])
    for p, g, n in zip(prompts[:3], mixed, [4, 12, 7]):
        assert len(g.token_ids) == n and g.finish_reason == "length"
        assert g.token_ids == dec.generate([p], settings_for(4, 6.2, 0.3, gen_length=n))[0].token_ids


def test_generation_stops_at_a_committed_stop_id(wedlm, prompts):
    settings = settings_for(4, 6.2, 0.3, gen_length=20)
    first = WeDLMDecoder(wedlm.model, wedlm.spec).generate(prompts[:1], settings)[0]
    stop = first.token_ids[6]
    spec = ModelSpec(**{**wedlm.spec.__dict__, "stop_ids": (stop,)})
    out = WeDLMDecoder(wedlm.model, spec).generate(prompts, settings)
    for p, g in zip(prompts, out):
        ref = reference_generate(wedlm.model, p, mask_id=spec.mask_token_id, stop_ids=(stop,), settings=settings)
        assert g.token_ids == ref and stop not in g.token_ids
    assert out[0].finish_reason == "stop" and out[0].token_ids == first.token_ids[: first.token_ids.index(stop)]


def test_forward_counts_follow_the_window(wedlm):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    # Threshold above any entropy: a step fills every mask, the next one (all filled) commits the
    # whole window: 2 forwards per window of 4, after the prefill.
    wide = dec.generate([[11, 12, 13]], settings_for(4, 100.0, 0.0, gen_length=8))[0]
    assert len(wide.token_ids) == 8 and wide.num_forwards == 1 + 2 * 2
    # A window of one slot degenerates to fill, commit: 2 forwards per token.
    narrow = dec.generate([[11, 12, 13]], settings_for(1, 0.4, 0.02, gen_length=8))[0]
    assert narrow.num_forwards == 1 + 2 * 8
    # The default threshold on a random model (entropy ~ log V) fills one mask per step; a window of 4
    # then commits one token per step once it is primed.
    default = dec.generate([[11, 12, 13]], settings_for(4, 0.4, 0.02, gen_length=8))[0]
    assert len(default.token_ids) == 8 and default.num_forwards < narrow.num_forwards


def test_sampling_is_reproducible_with_a_seed(wedlm, prompts):
    settings = DecodeSettings(gen_length=8, temperature=1.0, top_p=0.9, window_size=4, seed=7)
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    a, b = dec.generate(prompts, settings), dec.generate(prompts, settings)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(wedlm.spec.mask_token_id not in g.token_ids for g in a)


def test_bad_settings_and_checkpoints(wedlm, tiny_ar_dir):
    dec = WeDLMDecoder(wedlm.model, wedlm.spec)
    with pytest.raises(ValueError, match="empty prompt"):
        dec.generate([[]], DecodeSettings())
    with pytest.raises(ValueError, match="window_size must be >= 1"):
        DecodeSettings(window_size=0)
    ar = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    with pytest.raises(CheckpointError, match="no mask_token_id"):
        WeDLMDecoder(ar.model, ar.spec)
