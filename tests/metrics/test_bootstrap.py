import json
import random

import numpy as np
import pytest

from tests.conftest import run_script, write_lines
from textwm.metrics.bootstrap import (
    METRICS,
    ROW_METRICS,
    ScoredRows,
    align_by_index,
    bootstrap_intervals,
    paired_difference,
    replicates,
    resample_indices,
)
from textwm.metrics.diversity import distinct_n, self_bleu
from textwm.metrics.mauve import MauveResult, mauve_from_features
from textwm.metrics.overlap import bleu_1
from textwm.metrics.report import markdown_table
from textwm.metrics.scorer import SUMMARY_KEYS, PredictionRow, ScoreOptions, score_rows

ROOMS = ["kitchen", "hallway", "bedroom", "workshop", "greenhouse", "foundry"]
THINGS = ["a stove", "a sink", "a door", "a thermometer", "an orange", "a pot", "a chair", "a seed"]


def _observation(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(["Nothing happens.", "The door is now open.", "You pick up the thermometer."])
    return (f"This room is called the {rng.choice(ROOMS)}. In it, you see: "
            f"{', '.join(rng.sample(THINGS, rng.randint(1, 4)))}.")


def _rows(n=60, seed=0, p_right=0.5):
    """Prediction rows: right with probability ``p_right``, else another (different) observation."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ref = _observation(rng)
        pred = ref
        if rng.random() >= p_right:
            while pred == ref:
                pred = _observation(rng)
        rows.append(PredictionRow(index=i, prediction=pred, reference=ref, line=i + 1))
    return rows


def _scored(rows):
    return ScoredRows.from_records(score_rows(rows, ScoreOptions(compute_mauve=False))[1])


def test_intervals_contain_the_point_estimates():
    summary, _ = score_rows(_rows(), ScoreOptions(compute_mauve=False, bootstrap=200))
    for metric in ROW_METRICS:
        lo, hi = summary[f"{metric}_ci95"]
        assert lo <= summary[metric] <= hi, metric
        assert lo < hi, metric                      # these rows vary: a real interval
    assert summary["mauve_ci95"] is None
    assert summary["bootstrap"] == {"resamples": 200, "mauve_resamples": 0, "seed": 0, "mauve_bias": None}


def test_constant_metric_gives_a_zero_width_interval():
    summary, _ = score_rows(_rows(p_right=1.0), ScoreOptions(compute_mauve=False, bootstrap=100))
    for metric in ("exact_match", "semantic_match", "rouge_l_f1", "bleu_1"):
        assert summary[f"{metric}_ci95"] == [summary[metric]] * 2, metric
    assert summary["exact_match"] == 1.0 and summary["bleu_1"] == pytest.approx(1.0)  # sacrebleu: 1 + 4e-16
    wrong = _scored(_rows(p_right=0.0))
    values = replicates(wrong, resample_indices(len(wrong), 50), ["exact_match"])["exact_match"]
    assert set(values) == {0.0}


def test_same_seed_same_intervals():
    rows = _rows()
    first = score_rows(rows, ScoreOptions(compute_mauve=False, bootstrap=50, bootstrap_seed=3))[0]
    again = score_rows(rows, ScoreOptions(compute_mauve=False, bootstrap=50, bootstrap_seed=3))[0]
    other = score_rows(rows, ScoreOptions(compute_mauve=False, bootstrap=50, bootstrap_seed=4))[0]
    assert first == again
    assert first["rouge_l_f1_ci95"] != other["rouge_l_f1_ci95"]


def test_resamples_recompute_each_metric_by_its_definition():
    rows = _scored(_rows())
    indices = resample_indices(len(rows), 4, seed=1)
    got = replicates(rows, indices)
    for b, idx in enumerate(indices):
        preds = [rows.predictions[i] for i in idx]
        refs = [rows.references[i] for i in idx]
        assert got["bleu_1"][b] == bleu_1(preds, refs)       # corpus BLEU-1 of the resampled rows, exactly
        for metric in ("exact_match", "semantic_match", "rouge_l_f1"):
            assert got[metric][b] == pytest.approx(np.mean([rows.per_row[metric][i] for i in idx]), abs=1e-12)


def test_diversity_resamples_are_centred_on_the_point_estimate():
    """Distinct-n and Self-BLEU go through their jackknife influence: a resample drawing every row once scores the
    point estimate, and repeats do not drag the resamples away from it (as recomputing on resamples would)."""
    rows = _scored(_rows(n=80))
    everyone = np.arange(len(rows))[None, :]
    at_once = replicates(rows, everyone, ["self_bleu", "distinct_1", "distinct_2"])
    assert at_once["self_bleu"][0] == pytest.approx(self_bleu(rows.predictions)[0], abs=1e-12)
    assert at_once["distinct_2"][0] == pytest.approx(distinct_n(rows.predictions, 2), abs=1e-12)
    resampled = replicates(rows, resample_indices(len(rows), 300), ["distinct_2"])["distinct_2"]
    assert abs(np.median(resampled) - distinct_n(rows.predictions, 2)) < 0.02


def test_self_bleu_resamples_keep_the_scorers_cap():
    rows = _scored(_rows(n=40))
    capped = replicates(rows, resample_indices(len(rows), 50), ["self_bleu"], self_bleu_max_samples=10)["self_bleu"]
    value, used = self_bleu(rows.predictions, max_samples=10)
    assert used == 10 and np.min(capped) <= value <= np.max(capped)
    too_few = replicates(rows, resample_indices(len(rows), 5), ["self_bleu"], self_bleu_max_samples=2)
    assert too_few["self_bleu"] is None                      # a jackknife of 2 leaves one prediction: undefined


def test_paired_difference_excludes_zero_when_a_is_right_everywhere_and_b_nowhere():
    a, b = _scored(_rows(p_right=1.0)), _scored(_rows(p_right=0.0))
    for metric in ("exact_match", "semantic_match", "rouge_l_f1", "bleu_1"):
        diff = paired_difference(a, b, metric, resamples=200)
        assert diff.excludes_zero and diff.difference > 0 and diff.ci95[0] > 0, metric
    em = paired_difference(a, b, "exact_match", resamples=200)
    assert (em.difference, em.ci95, em.num_rows) == (1.0, [1.0, 1.0], 60)


def test_paired_difference_includes_zero_when_a_equals_b():
    a = _scored(_rows())
    for metric in ROW_METRICS:
        diff = paired_difference(a, a, metric, resamples=100)
        assert diff.difference == 0.0 and diff.ci95 == [0.0, 0.0] and not diff.excludes_zero, metric
    # Two systems of the same quality, right on different rows: the interval straddles 0.
    refs = a.references
    alternate = [_scored([PredictionRow(i, ref if (i + k) % 2 else "Nothing happens.", ref, i + 1)
                          for i, ref in enumerate(refs)]) for k in (0, 1)]
    diff = paired_difference(*alternate, "exact_match", resamples=300)
    assert diff.ci95[0] < 0 < diff.ci95[1] and not diff.excludes_zero


def test_paired_difference_needs_the_same_rows():
    a, b = _scored(_rows(n=10)), _scored(_rows(n=12))
    with pytest.raises(ValueError, match="align_by_index"):
        paired_difference(a, b, "exact_match")
    left, right = align_by_index(a, b)
    assert len(left) == len(right) == 10 and left.index == right.index
    with pytest.raises(ValueError, match="no resampling for mauve"):
        paired_difference(left, right, "mauve")


def test_mauve_interval_from_resampled_features():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(60, 8)).astype(np.float32)
    q = (rng.normal(size=(60, 8)) + 0.3).astype(np.float32)
    rows = _scored(_rows(n=60))
    result = MauveResult(mauve_from_features(p, q), 60, "random", tuple(range(60)), p, q)
    out = bootstrap_intervals(rows, resamples=20, mauve=result, mauve_resamples=3)
    lo, hi = out["mauve_ci95"]
    assert 0.0 <= lo <= result.score <= hi <= 1.0
    assert out["bootstrap"]["mauve_resamples"] == 3 and isinstance(out["bootstrap"]["mauve_bias"], float)
    assert set(out) == {f"{m}_ci95" for m in METRICS} | {"bootstrap"}
    # MAUVE over a sample of the rows is resampled within that sample.
    sampled = MauveResult(result.score, 30, "random", tuple(range(0, 60, 2)), p[::2], q[::2])
    assert bootstrap_intervals(rows, resamples=2, mauve=sampled, mauve_resamples=5)["bootstrap"]["mauve_resamples"] == 2


def test_bootstrap_off_leaves_the_summary_unchanged():
    rows = _rows()
    off, records = score_rows(rows, ScoreOptions(compute_mauve=False))
    assert set(off) == set(SUMMARY_KEYS) - {"num_bad_rows_skipped"}
    on, records_on = score_rows(rows, ScoreOptions(compute_mauve=False, bootstrap=20))
    assert {k: on[k] for k in off} == off and records_on == records    # point figures untouched
    assert set(on) - set(off) == {f"{m}_ci95" for m in METRICS} | {"bootstrap"}
    assert "[" not in markdown_table({"x": off}) and "bootstrap" not in markdown_table({"x": off})
    table = markdown_table({"x": on})
    lo, hi = on["exact_match_ci95"]
    assert f"{off['exact_match']:.4f} [{lo:.4f}, {hi:.4f}]" in table and "20 resamples, MAUVE 0" in table
    with pytest.raises(ValueError, match="bootstrap=-1"):
        ScoreOptions(bootstrap=-1)


def test_no_rows_gives_no_intervals():
    summary, _ = score_rows([PredictionRow(0, "ERROR: x", "ref", 1)], ScoreOptions(compute_mauve=False, bootstrap=10))
    assert all(summary[f"{m}_ci95"] is None for m in METRICS)


def test_evaluate_cli_bootstrap_flag(tmp_path):
    rows = _rows(n=12)
    write_lines(tmp_path / "t_outputs.jsonl", [{"index": r.index, "prediction_raw": r.prediction,
                                                "reference": r.reference} for r in rows])
    res = run_script("sdar/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "t", "--no-mauve",
                     "--bootstrap", "30", "--bootstrap-seed", "2", "--output-dir", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "out" / "eval_summary.json").read_text())["t"]
    assert summary["bootstrap"] == {"resamples": 30, "mauve_resamples": 0, "seed": 2, "mauve_bias": None}
    assert summary["exact_match_ci95"][0] <= summary["exact_match"] <= summary["exact_match_ci95"][1]
    scored = ScoredRows.from_file(tmp_path / "out" / "t_scored.jsonl")
    assert len(scored) == 12 and paired_difference(scored, scored, "rouge_l_f1", resamples=10).ci95 == [0.0, 0.0]
    res = run_script("sdar/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "t", "--bootstrap", "-1",
                     "--output-dir", str(tmp_path / "bad"))
    assert res.returncode == 2 and "--bootstrap must be >= 0" in res.stderr


def test_scorer_passes_mauve_features_to_the_bootstrap():
    """The offline featuriser, as the other MAUVE tests; MAUVE resamples reuse the scorer's features."""
    summary, _ = score_rows(_rows(n=16), ScoreOptions(bootstrap=10, mauve_resamples=2))
    assert summary["mauve_num_samples"] == 16 and summary["bootstrap"]["mauve_resamples"] == 2
    lo, hi = summary["mauve_ci95"]
    assert 0.0 <= lo <= hi <= 1.0
