import random

import pytest
from sacrebleu.metrics import BLEU

from textwm.metrics.diversity import (
    distinct_n,
    distinct_n_jackknife,
    sample_rows,
    self_bleu,
    self_bleu_jackknife,
)


def _self_bleu_reference(preds):
    """The definition, computed the slow way with sacrebleu itself."""
    bleu = BLEU(effective_order=True)
    return sum(bleu.sentence_score(p, preds[:i] + preds[i + 1:]).score / 100 for i, p in enumerate(preds)) / len(preds)


def test_self_bleu_equals_sacrebleu_leave_one_out():
    rng = random.Random(0)
    words = "you see a the kitchen door is open closed stove on off , . water".split()
    for trial in range(20):
        n = rng.randint(2, 25)
        preds = [" ".join(rng.choice(words) for _ in range(rng.randint(0 if trial % 3 else 1, 18))) for _ in range(n)]
        if trial % 4 == 0:
            preds += preds[:3]  # exact duplicates: the top-2 count bookkeeping must handle ties
        got, used = self_bleu(preds)
        assert used == len(preds)
        assert got == pytest.approx(_self_bleu_reference(preds), abs=1e-12)


def test_self_bleu_hand_computed():
    assert self_bleu(["a b c d", "a b c d"])[0] == pytest.approx(1.0)   # identical -> fully redundant
    assert self_bleu(["a b", "c d"])[0] == 0.0                           # nothing shared
    assert self_bleu(["only one"]) == (None, 1)


def test_self_bleu_samples_above_the_cap():
    preds = [f"row {i} of the set" for i in range(50)]
    value, used = self_bleu(preds, max_samples=10, seed=1)
    assert used == 10
    assert value == self_bleu(preds, max_samples=10, seed=1)[0]  # fixed seed -> same sample


def test_distinct_n_hand_computed():
    preds = ["a b a", "a c"]
    assert distinct_n(preds, 1) == pytest.approx(3 / 5)   # unigrams a b a a c: 3 unique of 5
    assert distinct_n(preds, 2) == pytest.approx(3 / 3)   # bigrams (a b) (b a) (a c)
    assert distinct_n(["x", "y"], 2) is None               # no bigram at all: undefined, not 0
    with pytest.raises(ValueError):
        distinct_n(preds, 0)


def test_jackknife_values_equal_recomputing_without_each_row():
    rng = random.Random(1)
    words = "you see a the kitchen door is open closed stove on off , . water".split()
    for trial in range(12):
        preds = [" ".join(rng.choice(words) for _ in range(rng.randint(0 if trial % 3 else 1, 12)))
                 for _ in range(rng.randint(3, 16))]
        if trial % 3 == 0:
            preds += preds[:2]  # duplicates: ties in the largest counts and in the lengths
        value, rows, loo = self_bleu_jackknife(preds)
        assert value == self_bleu(preds)[0] and rows == list(range(len(preds)))
        for i, got in zip(rows, loo):
            assert got == pytest.approx(self_bleu(preds[:i] + preds[i + 1:])[0], abs=1e-12)
        for n in (1, 2):
            assert distinct_n_jackknife(preds, n) == pytest.approx(
                [distinct_n(preds[:i] + preds[i + 1:], n) for i in range(len(preds))], abs=1e-15)


def test_jackknife_follows_the_self_bleu_sample_and_needs_three_rows():
    preds = [f"row {i} of the set" for i in range(30)]
    value, rows, loo = self_bleu_jackknife(preds, max_samples=8, seed=1)
    assert len(rows) == len(loo) == 8 and value == self_bleu(preds, max_samples=8, seed=1)[0]
    assert rows == sample_rows(30, 8, 1)
    assert self_bleu_jackknife(["a b", "a c"]) is None
    assert distinct_n_jackknife(["a b", "c"], 2) == [None, 1.0]   # without row 0 no bigram is left
