"""Speculative decoding: a diffusion drafter's tokens kept only where the AR verifier's greedy choice agrees, so
the answers are the verifier's greedy answers, in fewer verifier forwards when the drafter guesses well."""

from __future__ import annotations

import pytest

from textwm.generation.ar import ARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.speculative import SpeculativeDecoder
from textwm.models.checkpoint import load_model

from ..conftest import TINY_CORPUS

GREEDY = DecodeSettings(temperature=0.0, gen_length=20, block_length=4, denoising_steps=4)


@pytest.fixture(scope="module")
def llama(tiny_llama_dirs):
    """AR, SDAR and WeDLM of one tokenizer (the diffusion ones converted from the AR one)."""
    return {family: load_model(path, device="cpu", dtype="float32") for family, path in tiny_llama_dirs.items()}


def prompts_of(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(text) for text in TINY_CORPUS[:6]] + [tokenizer.encode("You")]


@pytest.mark.parametrize("drafter", ["sdar", "wedlm"])
@pytest.mark.parametrize("draft_length", [1, 3, 4])
def test_the_answers_are_the_verifiers_greedy_answers(llama, drafter, draft_length):
    ar = llama["ar"]
    prompts = prompts_of(ar.tokenizer)
    reference = ARDecoder(ar.model, ar.spec).generate(prompts, GREEDY, gen_lengths=[20, 5, 20, 1, 20, 20, 20])
    decoder = SpeculativeDecoder(ar, llama[drafter], draft_length=draft_length)
    got = decoder.generate(prompts, GREEDY, gen_lengths=[20, 5, 20, 1, 20, 20, 20])
    assert [(g.token_ids, g.finish_reason) for g in got] == [(r.token_ids, r.finish_reason) for r in reference]
    stats = decoder.stats
    assert 1 <= stats.tokens_per_verifier_forward <= draft_length + 1 and stats.drafted >= stats.accepted >= 0


def test_a_drafter_that_guesses_right_yields_a_whole_draft_and_one_more_per_forward(llama):
    ar = llama["ar"]
    decoder = SpeculativeDecoder(ar, ar, draft_length=4)      # the verifier drafting for itself: every guess right
    prompt = ar.tokenizer.encode(TINY_CORPUS[0])
    (got,) = decoder.generate([prompt], DecodeSettings(temperature=0.0, gen_length=15))
    (want,) = ARDecoder(ar.model, ar.spec).generate([prompt], DecodeSettings(temperature=0.0, gen_length=15))
    assert got.token_ids == want.token_ids
    assert decoder.stats.acceptance == 1.0
    if want.finish_reason == "length":   # 15 tokens: a prefill, then rounds of 5 (4 drafted + the verifier's own)
        assert got.num_forwards == 1 + 3


def test_what_cannot_be_verified_losslessly_is_refused(llama, tiny_ar_dir, tmp_path):
    from textwm.models.tiny import build_tiny_checkpoint

    ar = llama["ar"]
    with pytest.raises(ValueError, match="verifier must be an AR model"):
        SpeculativeDecoder(llama["sdar"], ar)
    other = load_model(build_tiny_checkpoint(tmp_path / "other", ["a b c d e f g"] * 20, family="sdar",
                                             vocab_size=120, seed=5), device="cpu", dtype="float32")
    with pytest.raises(ValueError, match="tokenizer is not the verifier's"):
        SpeculativeDecoder(ar, other)
    decoder = SpeculativeDecoder(ar, llama["sdar"])
    with pytest.raises(ValueError, match="greedy"):
        decoder.generate([[1, 2]], DecodeSettings(temperature=0.7))
    with pytest.raises(ValueError, match="draft_length"):
        SpeculativeDecoder(ar, llama["sdar"], draft_length=0)


# --- in the engine ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama64(tiny_llama_dirs):
    """The same three models in float64, so the engine's attention and the reference's agree to the last bit."""
    out = {}
    for family, path in tiny_llama_dirs.items():
        lm = load_model(path, device="cpu", dtype="float32")
        lm.model.double()
        out[family] = lm
    return out


@pytest.mark.parametrize("drafter", ["sdar", "wedlm"])
@pytest.mark.parametrize("draft_length", [1, 3, 4])
def test_the_engine_hybrid_gives_the_verifiers_answers_in_the_reference_hybrids_rounds(llama64, drafter,
                                                                                       draft_length):
    """Static caches, a verifier never cut back and a drafter that keeps its context's blocks: the same answers, and
    the same drafts kept, as the reference hybrid's."""
    from textwm.generation.engine.speculative import EngineSpeculativeDecoder

    ar, lengths = llama64["ar"], [20, 5, 20, 1, 20, 20, 20]
    prompts = prompts_of(ar.tokenizer)
    reference = SpeculativeDecoder(ar, llama64[drafter], draft_length=draft_length)
    want = reference.generate(prompts, GREEDY, gen_lengths=lengths)
    engine = EngineSpeculativeDecoder(ar, llama64[drafter], draft_length=draft_length, max_len=128)
    got = engine.generate(prompts, GREEDY, gen_lengths=lengths)
    assert [(g.token_ids, g.finish_reason, g.num_forwards) for g in got] == \
        [(r.token_ids, r.finish_reason, r.num_forwards) for r in want]
    assert (engine.stats.drafted, engine.stats.accepted, engine.stats.generated) == \
        (reference.stats.drafted, reference.stats.accepted, reference.stats.generated)
    assert engine.drafter.prompt_stats.hit_tokens > 0        # the drafter's context kept from round to round


def test_the_engine_hybrid_refuses_what_it_cannot_keep(llama64):
    from textwm.generation.engine.speculative import EngineSpeculativeDecoder

    decoder = EngineSpeculativeDecoder(llama64["ar"], llama64["sdar"], max_len=32, block_length=4)
    with pytest.raises(ValueError, match="exceeds max_len 32"):
        decoder.generate([[5] * 30], DecodeSettings(temperature=0.0, gen_length=8))
    with pytest.raises(ValueError, match="block_length 32 does not divide"):
        decoder.generate([[5, 6]], DecodeSettings(temperature=0.0, gen_length=4, block_length=32))
    with pytest.raises(ValueError, match="verifier must be an AR model"):
        EngineSpeculativeDecoder(llama64["sdar"], llama64["ar"])
