import json

import pytest

from tests.conftest import write_lines
from textwm.data.jsonl import DataError, read_jsonl
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.metrics.scorer import (
    SUMMARY_KEYS,
    PredictionRow,
    ScoreOptions,
    read_predictions,
    score_file,
    score_rows,
)

NO_MAUVE = ScoreOptions(compute_mauve=False)


def _row(i, pred, ref, line=0):
    return PredictionRow(index=i, prediction=pred, reference=ref, line=line)


def test_kept_rows_dedupe_errors_empty_refs():
    rows = [
        _row(0, "The door is open.", "The door is open."),
        _row(0, "duplicate index: ignored", "x"),
        _row(1, "ERROR: CUDA out of memory", "x"),
        _row(2, "anything", "<think>only a thought</think>"),   # empty after normalisation
        _row(3, '{"b": 2, "a": 1}', '{"a":1,"b":2}'),
        _row(None, "no index", "no index"),
        _row(None, "no index", "no index"),                       # rows without index are never merged
    ]
    summary, records = score_rows(rows, NO_MAUVE)
    assert (summary["num_samples"], summary["num_duplicates_dropped"], summary["num_dropped_errors"],
            summary["num_empty_ref_dropped"]) == (4, 1, 1, 1)
    assert summary["exact_match"] == 1.0 and summary["semantic_match"] == 1.0
    assert [r["match"] for r in records] == [True, True, True, True]
    assert records[1]["prediction_clean"] == '{"a":1,"b":2}'


def test_overlong_rows_dropped_and_counted_unless_kept(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [
        {"index": 0, "prediction_raw": "You see a door.", "reference": "You see a door.", "skipped_overlong": False},
        {"index": 1, "prediction_raw": SKIPPED_OVERLONG, "reference": "x", "skipped_overlong": True},
        {"index": 2, "prediction_raw": SKIPPED_OVERLONG, "reference": "y"},         # marker alone
        {"index": 3, "prediction_raw": "text", "reference": "z", "skipped_overlong": True},  # flag alone
    ])
    rows, _ = read_predictions(path)
    assert [r.is_overlong for r in rows] == [False, True, True, True]
    summary, _ = score_rows(rows, NO_MAUVE)
    assert (summary["num_samples"], summary["num_skipped_overlong"], summary["exact_match"]) == (1, 3, 1.0)
    summary, records = score_rows(rows, ScoreOptions(compute_mauve=False, drop_overlong=False))
    assert (summary["num_samples"], summary["num_skipped_overlong"]) == (4, 0)
    assert records[1]["prediction_raw"] == SKIPPED_OVERLONG and not records[1]["match"]
    bad = write_lines(tmp_path / "bad.jsonl", [{"prediction_raw": "a", "reference": "a", "skipped_overlong": "yes"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: skipped_overlong: skipped_overlong must be true/false"):
        read_predictions(bad)


def test_rouge_impl_recorded_and_failures_counted(caplog):
    rows = [_row(0, "You see a door.", "You see a door."), _row(1, "...", "a b c"), _row(2, "a b", "a c")]
    default, _ = score_rows(rows, NO_MAUVE)
    assert (default["rouge_impl"], default["num_rouge_errors"]) == ("rouge_score", 0)
    summary, records = score_rows(rows, ScoreOptions(compute_mauve=False, rouge_impl="pltrdy"))
    assert (summary["rouge_impl"], summary["num_rouge_errors"]) == ("pltrdy", 1)
    assert records[1]["rouge_l_f1"] == 0.0 and records[1]["rouge_l_error"] == "ValueError: Hypothesis is empty."
    assert "rouge_l_error" not in records[0]
    assert summary["rouge_l_f1"] == pytest.approx(sum(r["rouge_l_f1"] for r in records) / 3)
    assert "pltrdy ROUGE-L failed on 1 of 3 rows (ValueError: 1)" in caplog.text
    with pytest.raises(ValueError, match="rouge_impl='rouge'"):
        ScoreOptions(rouge_impl="rouge")


def test_keep_flags_and_semantic_vs_exact():
    rows = [_row(0, "ERROR: boom", "ref"), _row(1, "1.0", "1"), _row(1, "x", "")]
    summary, records = score_rows(rows, ScoreOptions(compute_mauve=False, drop_errors=False,
                                                     drop_empty_ref=False, dedupe_by_index=False))
    assert summary["num_samples"] == 3
    assert [r["match"] for r in records] == [False, False, False]
    assert [r["semantic_match"] for r in records] == [False, True, False]  # 1.0 == 1 as JSON
    assert summary["semantic_match"] == pytest.approx(1 / 3)


def test_summary_has_every_key_and_none_when_nothing_is_left(caplog):
    summary, records = score_rows([_row(0, "ERROR: x", "ref")], ScoreOptions())
    assert set(SUMMARY_KEYS) - {"num_bad_rows_skipped"} == set(summary)
    assert records == []
    assert summary["num_samples"] == 0
    for key in ("exact_match", "rouge_l_f1", "bleu_1", "self_bleu", "distinct_1", "mauve"):
        assert summary[key] is None, key
    assert "no rows left to score" in caplog.text


def test_extract_output_field_applies_to_references_only():
    ref = json.dumps({"api_name": "Search", "input": {}, "output": [1], "exception": None})
    summary, _ = score_rows([_row(0, '{"output": [1], "exception": null}', ref)],
                            ScoreOptions(compute_mauve=False, extract_output_field=True))
    assert summary["exact_match"] == 1.0


def test_read_predictions_field_aliases_and_errors(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [
        {"index": 0, "prediction_raw": "a", "reference": "a"},
        {"index": 1, "predicted": "b", "expected": "b"},
        {"index": 2, "generated": "c", "ground_truth": "c"},
    ])
    rows, n_bad = read_predictions(path)
    assert [(r.prediction, r.reference, r.line) for r in rows] == [("a", "a", 1), ("b", "b", 2), ("c", "c", 3)]
    bad = write_lines(tmp_path / "bad.jsonl", [{"index": 0, "prediction_raw": "a", "reference": "a"},
                                               {"index": 1, "output": "b", "reference": "b"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: row has no prediction field \(expected one of prediction_raw"):
        read_predictions(bad)
    nulls = write_lines(tmp_path / "null.jsonl", [{"prediction_raw": None, "reference": "a"}])
    with pytest.raises(DataError, match=r"null\.jsonl:1: prediction_raw: prediction must be a string, got NoneType"):
        read_predictions(nulls)
    rows, n_bad = read_predictions(bad, on_error="skip")
    assert (len(rows), n_bad) == (1, 1)


def test_score_file_writes_per_row_records(tmp_path):
    path = write_lines(tmp_path / "x_outputs.jsonl", [
        {"index": i, "prediction_raw": f"you see a door {i}", "reference": f"you see a door {i % 3}"} for i in range(6)])
    summary = score_file("x", path, tmp_path / "out", ScoreOptions(mauve_max_samples=4))
    records = read_jsonl(tmp_path / "out" / "x_scored.jsonl").rows
    assert len(records) == 6
    assert set(records[0]) == {"index", "prediction_raw", "prediction_clean", "reference_raw", "reference_clean",
                               "match", "semantic_match", "rouge_l_f1"}
    assert summary["exact_match"] == pytest.approx(3 / 6)
    assert 0.0 <= summary["mauve"] <= 1.0 and summary["mauve_num_samples"] == 4
    assert summary["num_bad_rows_skipped"] == 0
