"""The one scorer for world-model outputs.

Reads prediction rows as the paper's generation scripts write them, keeps the rows that count,
normalises both sides and computes every metric once:

* prediction text: the first of ``prediction_raw``, ``predicted``, ``generated`` present;
* reference text: the first of ``reference``, ``expected``, ``ground_truth`` present;
* kept rows: de-duplicated by ``index`` (first wins; rows without ``index`` are never merged),
  ``ERROR...`` predictions and empty normalised references dropped — each drop counted.

Per-row results go to ``<name>_scored.jsonl``; the dataset summary is a dict with the keys of
:data:`SUMMARY_KEYS` (a metric with nothing to measure is ``None``, never a made-up 0).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from textwm.data.jsonl import DataError, OnError, read_jsonl, write_jsonl
from textwm.data.text import extract_output_field, normalize
from textwm.metrics.diversity import SELF_BLEU_MAX_SAMPLES, distinct_n, self_bleu
from textwm.metrics.mauve import DEFAULT_FEATURIZER, MAUVE_MAX_SAMPLES, mauve_score
from textwm.metrics.overlap import bleu_1, rouge_l_f1

log = logging.getLogger(__name__)

PREDICTION_FIELDS = ("prediction_raw", "predicted", "generated")
REFERENCE_FIELDS = ("reference", "expected", "ground_truth")
#: Predictions starting with this are generation failures written by the generators.
ERROR_PREFIX = "ERROR"

#: Keys of a dataset summary, in report order.
SUMMARY_KEYS = (
    "num_samples", "num_dropped_errors", "num_empty_ref_dropped", "num_duplicates_dropped",
    "exact_match", "semantic_match", "rouge_l_f1", "bleu_1", "self_bleu", "self_bleu_num_samples",
    "distinct_1", "distinct_2", "mauve", "mauve_featurizer", "mauve_num_samples", "num_bad_rows_skipped",
)
#: The metrics in [0, 1] that tables and charts show, with their display names.
METRIC_LABELS = {
    "exact_match": "EM",
    "semantic_match": "Semantic",
    "rouge_l_f1": "ROUGE-L",
    "bleu_1": "BLEU-1",
    "self_bleu": "Self-BLEU (lower = more diverse)",
    "distinct_1": "Distinct-1",
    "distinct_2": "Distinct-2",
    "mauve": "MAUVE",
}


@dataclass(frozen=True)
class ScoreOptions:
    """What counts as a kept row, and how MAUVE is computed."""

    drop_errors: bool = True
    drop_empty_ref: bool = True
    dedupe_by_index: bool = True
    #: Reduce references to ``{output, exception}`` (api_bank-style datasets).
    extract_output_field: bool = False
    compute_mauve: bool = True
    mauve_featurizer: str = DEFAULT_FEATURIZER
    mauve_max_samples: int = MAUVE_MAX_SAMPLES
    self_bleu_max_samples: int = SELF_BLEU_MAX_SAMPLES
    on_bad_row: OnError = "fail"


@dataclass(frozen=True)
class PredictionRow:
    index: Any
    prediction: str
    reference: str
    line: int


def _first_field(row: dict, names: Sequence[str], what: str) -> str:
    for name in names:
        if name in row:
            value = row[name]
            if not isinstance(value, str):
                raise DataError(f"{what} must be a string, got {type(value).__name__}", field=name)
            return value
    raise DataError(f"row has no {what} field (expected one of {', '.join(names)}; "
                    f"fields present: {', '.join(sorted(row)) or 'none'})")


def read_predictions(path: str | Path, *, on_error: OnError = "fail") -> tuple[list[PredictionRow], int]:
    """Read a predictions JSONL file; returns ``(rows, number of malformed rows skipped)``.

    Malformed rows raise a line-numbered :class:`DataError` unless ``on_error="skip"``.
    """
    def validate(obj: Any) -> dict:
        if not isinstance(obj, dict):
            raise DataError(f"row must be a JSON object, got {type(obj).__name__}")
        return {"index": obj.get("index"), "prediction": _first_field(obj, PREDICTION_FIELDS, "prediction"),
                "reference": _first_field(obj, REFERENCE_FIELDS, "reference")}

    report = read_jsonl(path, validate=validate, on_error=on_error)
    rows = [PredictionRow(line=line, **row) for row, line in zip(report.rows, report.line_numbers)]
    return rows, len(report.skipped)


def score_rows(rows: Sequence[PredictionRow], options: ScoreOptions = ScoreOptions(), *, name: str = ""
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score prediction rows; returns ``(summary, per-row records)``."""
    kept: list[tuple[PredictionRow, str, str]] = []
    seen: set = set()
    n_dup = n_err = n_empty = 0
    for row in rows:
        if options.dedupe_by_index and row.index is not None:
            key = json.dumps(row.index, sort_keys=True)
            if key in seen:
                n_dup += 1
                continue
            seen.add(key)
        if options.drop_errors and row.prediction.startswith(ERROR_PREFIX):
            n_err += 1
            continue
        pred = normalize(row.prediction)
        ref = extract_output_field(row.reference) if options.extract_output_field else normalize(row.reference)
        if options.drop_empty_ref and not ref.strip():
            n_empty += 1
            continue
        kept.append((row, pred, ref))

    preds = [p for _, p, _ in kept]
    refs = [r for _, _, r in kept]
    records: list[dict[str, Any]] = []
    n_exact = n_semantic = 0
    rouge_sum = 0.0
    for row, pred, ref in tqdm(kept, desc=f"scoring {name}".strip(), unit="row", mininterval=2.0,
                               disable=len(kept) < 2000):
        exact = pred == ref
        semantic = _semantic_match(pred, ref)
        rouge = rouge_l_f1(pred, ref)
        n_exact += exact
        n_semantic += semantic
        rouge_sum += rouge
        records.append({"index": row.index, "prediction_raw": row.prediction, "prediction_clean": pred,
                        "reference_raw": row.reference, "reference_clean": ref, "match": exact,
                        "semantic_match": semantic, "rouge_l_f1": rouge})

    n = len(kept)
    if n == 0:
        log.warning("%s: no rows left to score (%d errors, %d empty references, %d duplicates dropped)",
                    name or "dataset", n_err, n_empty, n_dup)
    sb, sb_n = self_bleu(preds, max_samples=options.self_bleu_max_samples)
    summary: dict[str, Any] = {
        "num_samples": n,
        "num_dropped_errors": n_err,
        "num_empty_ref_dropped": n_empty,
        "num_duplicates_dropped": n_dup,
        "exact_match": n_exact / n if n else None,
        "semantic_match": n_semantic / n if n else None,
        "rouge_l_f1": rouge_sum / n if n else None,
        "bleu_1": bleu_1(preds, refs),
        "self_bleu": sb,
        "self_bleu_num_samples": sb_n,
        "distinct_1": distinct_n(preds, 1),
        "distinct_2": distinct_n(preds, 2),
        "mauve": None,
        "mauve_featurizer": options.mauve_featurizer if options.compute_mauve else None,
        "mauve_num_samples": 0,
    }
    if options.compute_mauve:
        started = time.perf_counter()
        result = mauve_score(preds, refs, featurizer=options.mauve_featurizer, max_samples=options.mauve_max_samples)
        summary["mauve"], summary["mauve_num_samples"] = result.score, result.num_samples
        log.info("%s: MAUVE over %d rows in %.1fs", name or "dataset", result.num_samples,
                 time.perf_counter() - started)
    return summary, records


def _semantic_match(pred: str, ref: str) -> bool:
    """Parsed-JSON equality when both sides are JSON, else exact string equality."""
    try:
        return json.loads(pred) == json.loads(ref)
    except (json.JSONDecodeError, ValueError):
        return pred == ref


def score_and_write(name: str, rows: Sequence[PredictionRow], output_dir: str | Path,
                    options: ScoreOptions = ScoreOptions(), *, num_bad_rows_skipped: int = 0) -> dict[str, Any]:
    """Score already-read rows, write ``<output_dir>/<name>_scored.jsonl``, return the summary."""
    summary, records = score_rows(rows, options, name=name)
    summary["num_bad_rows_skipped"] = num_bad_rows_skipped
    write_jsonl(Path(output_dir) / f"{name}_scored.jsonl", records)
    return summary


def score_file(name: str, path: str | Path, output_dir: str | Path, options: ScoreOptions = ScoreOptions()
               ) -> dict[str, Any]:
    """Read and score one predictions file (see :func:`score_and_write`)."""
    rows, n_bad = read_predictions(path, on_error=options.on_bad_row)
    return score_and_write(name, rows, output_dir, options, num_bad_rows_skipped=n_bad)
