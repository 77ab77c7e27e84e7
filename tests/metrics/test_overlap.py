import json
import random
import subprocess
import sys

import pytest
from rouge import Rouge
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

from textwm.metrics.overlap import (
    PAPER_RECURSION_HEADROOM,
    bleu_1,
    bleu_1_from_stats,
    bleu_1_row_stats,
    lcs_length,
    rouge_l,
    rouge_l_f1,
    rouge_l_f1_pltrdy,
)

#: Hand-written (prediction, reference) pairs: sentences, JSON, case, empty sides, a dots-only side.
PAIRS = [
    ("You see a door. It is red.", "You see the door. It is blue."),
    ("the cat sat on the mat", "the cat is on the mat"),
    ('{"a":1,"b":[2,3]}', '{"a":1,"b":[2,4]}'),
    ("Open DOOR!", "open the door now"),
    ("", "You see a kitchen."),
    ("You see a kitchen.", ""),
    ("", ""),
    ("...", "a b c"),
]


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


def test_rouge_score_impl_equals_library_on_hand_written_pairs():
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    for pred, ref in PAIRS:
        assert rouge_l(pred, ref, "rouge_score") == (pytest.approx(scorer.score(ref, pred)["rougeL"].fmeasure,
                                                                   abs=1e-12), None)


def test_pltrdy_impl_equals_library_called_as_the_paper_does():
    # The paper's compute_metrics: Rouge().get_scores(pred or " ", ref or " ")[0]["rouge-l"]["f"], 0.0 on error.
    library = Rouge()
    for pred, ref in PAIRS:
        try:
            expected, failed = library.get_scores(pred or " ", ref or " ")[0]["rouge-l"]["f"], False
        except ValueError:
            expected, failed = 0.0, True
        score, error = rouge_l(pred, ref, "pltrdy")
        assert score == expected, (pred, ref)
        assert (error is not None) == failed, (pred, ref, error)
    assert rouge_l("", "", "pltrdy")[0] == pytest.approx(1.0, abs=1e-6)   # " " vs " ": the library's ~1.0
    assert rouge_l("...", "a b c", "pltrdy") == (0.0, "ValueError: Hypothesis is empty.")
    with pytest.raises(ValueError, match="unknown ROUGE implementation 'nope'"):
        rouge_l("a", "a", "nope")


#: The paper's call stack down to the ROUGE call: python evaluate.py -> main -> score_file -> compute_metrics.
PAPER_LAYOUT = """
import json, sys
from rouge import Rouge

def main():
    return score_file()

def score_file():
    return compute_metrics()

def compute_metrics():
    ok = []
    for k in json.loads(sys.argv[1]):
        try:
            Rouge().get_scores(" ".join(["b"] * k), "a")
            ok.append(True)
        except RecursionError:
            ok.append(False)
    return ok

print(json.dumps(main()))
"""


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="PAPER_RECURSION_HEADROOM is CPython 3.11's")
def test_pltrdy_long_rows_fail_where_they_failed_in_the_paper(tmp_path):
    """pltrdy's LCS back-tracking recurses once per token (hypothesis "b b ... b" against reference "a"):
    run the library from the paper's call stack in a fresh interpreter to see which lengths raise
    RecursionError; ours must agree from any depth, and leave the recursion limit as it was."""
    lengths = list(range(PAPER_RECURSION_HEADROOM - 30, PAPER_RECURSION_HEADROOM + 10))
    script = tmp_path / "evaluate.py"
    script.write_text(PAPER_LAYOUT)
    res = subprocess.run([sys.executable, str(script), json.dumps(lengths)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    paper = json.loads(res.stdout)
    assert True in paper and False in paper  # the boundary lies inside the range

    def nested(depth):
        if depth:
            return nested(depth - 1)
        return [rouge_l_f1_pltrdy(" ".join(["b"] * k), "a")[1] is None for k in lengths]
    limit = sys.getrecursionlimit()
    assert nested(0) == paper and nested(300) == paper
    assert sys.getrecursionlimit() == limit
    sys.setrecursionlimit(50_000)  # a process that raised the limit gets the paper's headroom all the same
    try:
        assert nested(0) == paper
    finally:
        sys.setrecursionlimit(limit)
    score, error = rouge_l_f1_pltrdy(" ".join(["b"] * 3000), "a")
    assert score == 0.0 and error.startswith("RecursionError")


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
    assert bleu_1(preds, refs) == expected   # the same sacrebleu steps: row statistics, summed, scored
    stats = bleu_1_row_stats(preds, refs)
    assert len(stats) == 50 and all(len(row) == 4 for row in stats)
    assert bleu_1_from_stats([sum(col) for col in zip(*stats[:20])]) == bleu_1(preds[:20], refs[:20])


def test_bleu_1_length_mismatch():
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        bleu_1(["a", "b"], ["a"])
