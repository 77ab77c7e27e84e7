import random

import pytest
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

from textwm.metrics.overlap import bleu_1, lcs_length, rouge_l_f1


def _lcs_dp(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_lcs_matches_dynamic_programming():
    rng = random.Random(0)
    for _ in range(500):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 80))]
        b = [rng.choice("abcde") for _ in range(rng.randint(0, 80))]
        assert lcs_length(a, b) == _lcs_dp(a, b)


def test_rouge_l_hand_computed():
    # LCS("the cat sat on the mat", "the cat is on the mat") = "the cat on the mat" = 5 of 6 tokens.
    assert rouge_l_f1("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    # P = 2/2, R = 2/4 -> F = 2PR/(P+R) = 2/3; case and punctuation ignored by the tokenizer.
    assert rouge_l_f1("Open DOOR!", "open the door now") == pytest.approx(2 / 3)
    assert rouge_l_f1("", "anything") == 0.0
    assert rouge_l_f1("!!!", "???") == 0.0


def test_rouge_l_equals_rouge_score_library():
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    rng = random.Random(1)
    words = "the door kitchen is open closed you see a thermometer water 42 degrees, (that) Ünï".split()
    for _ in range(300):
        pred = " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        ref = " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        assert rouge_l_f1(pred, ref) == pytest.approx(scorer.score(ref, pred)["rougeL"].fmeasure, abs=1e-12)


def test_bleu_1_hand_computed():
    # 2 of 3 hypothesis unigrams appear in the reference; equal lengths -> no brevity penalty.
    assert bleu_1(["the cat sat"], ["the cat is"]) == pytest.approx(2 / 3)
    # Hypothesis shorter than reference: BP = exp(1 - 4/2); precision 1.
    assert bleu_1(["a b"], ["a b c d"]) == pytest.approx(2.718281828 ** (1 - 2))
    assert bleu_1([], []) is None


def test_bleu_1_equals_sacrebleu():
    rng = random.Random(2)
    words = "you see a kitchen door open closed the stove is on off".split()
    preds = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 15))) for _ in range(50)]
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 15))) for _ in range(50)]
    expected = BLEU(max_ngram_order=1).corpus_score(preds, [refs]).score / 100
    assert bleu_1(preds, refs) == pytest.approx(expected, abs=1e-12)


def test_bleu_1_length_mismatch():
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        bleu_1(["a", "b"], ["a"])
