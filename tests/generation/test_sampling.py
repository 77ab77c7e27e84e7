import math

import pytest
import torch

from textwm.generation.remasking import select_transfer, transfer_schedule
from textwm.generation.sampling import (
    entropy,
    logits_entropy,
    sample,
    sample_filter_first,
    top_k_filter,
    top_p_filter,
)

NEG = float("-inf")


def test_top_k_and_top_p_filters():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert top_k_filter(logits, 2).tolist() == [[NEG, 3.0, 2.0]]
    assert torch.equal(top_k_filter(logits, 0), logits)
    probs_logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    kept = top_p_filter(probs_logits, 0.6)              # 0.5 < 0.6: the token crossing p (0.3) is kept
    assert torch.isinf(kept[0, 2]) and torch.isfinite(kept[0, :2]).all()
    assert torch.isfinite(top_p_filter(probs_logits, 1.0)).all()


def test_greedy_confidence_is_softmax_of_argmax():
    logits = torch.tensor([[0.0, math.log(3.0), 0.0]])
    s = sample(logits, temperature=0)
    assert s.tokens.tolist() == [1]
    assert s.confidence.item() == pytest.approx(0.6)


def test_sampling_respects_filters_and_seed():
    logits = torch.tensor([[5.0, 4.0, -2.0, -3.0]]).repeat(200, 1)
    gen = torch.Generator().manual_seed(0)
    s = sample(logits, temperature=1.0, top_k=2, generator=gen)
    assert set(s.tokens.tolist()) <= {0, 1}
    again = sample(logits, temperature=1.0, top_k=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(s.tokens, again.tokens)
    assert torch.allclose(s.confidence, s.probs.gather(-1, s.tokens[:, None]).squeeze(-1))


def test_entropy():
    probs = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    assert entropy(probs).tolist() == pytest.approx([math.log(2), 0.0])


def test_wedlm_order_takes_top_p_before_the_temperature():
    """Tencent/WeDLM Sampler.sample_tokens: the nucleus is taken on the unscaled distribution."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    # Unscaled, 0.5 < 0.6 keeps tokens 0 and 1; then T = 0.5 squares the odds: 0.25 : 0.09.
    wedlm = sample_filter_first(logits, temperature=0.5, top_p=0.6, generator=torch.Generator().manual_seed(0))
    assert wedlm.probs[0].tolist() == pytest.approx([0.25 / 0.34, 0.09 / 0.34, 0.0])
    # sample() scales first (0.657, 0.237, 0.105): the nucleus is token 0 alone.
    assert sample(logits, temperature=0.5, top_p=0.6).probs[0].tolist() == pytest.approx([1.0, 0.0, 0.0])
    draws = sample_filter_first(logits.repeat(400, 1), temperature=0.5, top_p=0.6,
                                generator=torch.Generator().manual_seed(1)).tokens
    assert set(draws.tolist()) == {0, 1}
    # Top-k keeps the k largest either way; temperature 0 is the argmax, filters ignored.
    assert sample_filter_first(logits, temperature=1.0, top_k=1).tokens.tolist() == [0]
    greedy = sample_filter_first(torch.tensor([[0.0, 2.0, 1.0]]), temperature=0, top_k=1, top_p=0.1)
    assert greedy.tokens.tolist() == [1] and greedy.probs.sum().item() == pytest.approx(1.0)


def test_logits_entropy_is_that_of_the_raw_distribution():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0)) * 3
    want = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(logits_entropy(logits), want, atol=1e-5)
    assert torch.allclose(logits_entropy(logits), entropy(torch.softmax(logits, -1)), atol=1e-5)
    banned = torch.tensor([[0.0, 0.0, NEG]])
    assert logits_entropy(banned).tolist() == pytest.approx([math.log(2)])


def test_transfer_schedule():
    assert transfer_schedule(4, 4) == [1, 1, 1, 1]
    assert transfer_schedule(4, 3) == [2, 1, 1]
    assert transfer_schedule(8, 3) == [3, 3, 2]
    assert transfer_schedule(4, 1) == [4]
    with pytest.raises(ValueError):
        transfer_schedule(4, 0)


MASK = torch.tensor([[True, False, True, True, True]])
CONF = torch.tensor([[0.9, 0.99, 0.2, 0.95, 0.2]])


def _sel(strategy, k, **kw):
    return select_transfer(strategy, MASK, CONF, torch.tensor([k]), **kw)[0].nonzero().flatten().tolist()


def test_strategies_hand_computed():
    assert _sel("sequential", 2) == [0, 2]                          # next masks left to right (1 is prompt)
    assert _sel("low_confidence_static", 2) == [0, 3]               # top-2 confidence among masks
    assert _sel("low_confidence_static", 3) == [0, 2, 3]            # tie 0.2 vs 0.2 -> leftmost
    assert _sel("low_confidence_dynamic", 1, confidence_threshold=0.85) == [0, 3]   # all above threshold
    assert _sel("low_confidence_dynamic", 3, confidence_threshold=0.85) == [0, 2, 3]  # too few -> top-k
    ent = torch.tensor([[0.1, 0.0, 0.3, 0.05, 2.0]])
    # sorted masked entropies 0.05, 0.1, 0.3, 2.0: sum - max = 0, 0.05, 0.15, 0.45 -> budget 0.2 admits 3
    assert select_transfer("entropy_bounded", MASK, CONF, torch.tensor([1]), entropy=ent,
                           entropy_budget=0.2)[0].nonzero().flatten().tolist() == [0, 2, 3]
    # never fewer than the schedule's k
    assert select_transfer("entropy_bounded", MASK, CONF, torch.tensor([4]), entropy=ent,
                           entropy_budget=0.0)[0].nonzero().flatten().tolist() == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown remasking strategy"):
        _sel("random", 1)


def test_the_exponential_race_draws_the_categorical_distribution():
    from textwm.generation.sampling import draw

    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.0, 0.5]]).repeat(50_000, 1)
    for how in ("multinomial", "race"):
        tokens = draw(probs, generator=torch.Generator().manual_seed(0), how=how).view(-1, 2)
        freq = torch.stack([torch.bincount(tokens[:, j], minlength=4) for j in range(2)]).float() / 50_000
        assert torch.allclose(freq, probs[:2], atol=0.01), (how, freq)      # ~4 standard errors
        assert (tokens[:, 1] % 2 == 1).all()                                 # zero-probability tokens never drawn
    a, b = (draw(probs[:8], generator=torch.Generator().manual_seed(3), how="race") for _ in range(2))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="draw must be one of"):
        draw(probs, how="gumbel")
