"""The one scorer for world-model outputs.

Reads prediction rows as the paper's generation scripts write them, keeps the rows that count,
normalises both sides and computes every metric once:

* prediction text: the first of ``prediction_raw``, ``predicted``, ``generated`` present;
* reference text: the first of ``reference``, ``expected``, ``ground_truth`` present;
* kept rows: de-duplicated by ``index`` (first wins; rows without ``index`` are never merged),
  rows whose prompt was too long to generate (:data:`SKIPPED_OVERLONG`) dropped, ``ERROR...``
  predictions and empty normalised references dropped — each drop counted.

ROUGE-L is Google ``rouge_score``'s by default, or pltrdy ``rouge``'s as the paper's scripts
compute it (``ScoreOptions.rouge_impl``, see :mod:`textwm.metrics.overlap`); the summary records which.

Per-row results go to ``<name>_scored.jsonl``; the dataset summary is a dict with the keys of
:data:`SUMMARY_KEYS` (a metric with nothing to measure is ``None``, never a made-up 0). With
``ScoreOptions.bootstrap = B > 0`` it also has ``<metric>_ci95: [lo, hi]`` for each metric of :data:`METRIC_LABELS`
(95% percentile bootstrap over the kept rows, :mod:`textwm.metrics.bootstrap`) and
``bootstrap: {resamples, mauve_resamples, seed, mauve_bias}``.
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
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.data.text import extract_output_field, normalize
from textwm.metrics.bootstrap import MAUVE_RESAMPLES, ScoredRows, bootstrap_intervals
from textwm.metrics.diversity import SELF_BLEU_MAX_SAMPLES, distinct_n, self_bleu
from textwm.metrics.mauve import DEFAULT_FEATURIZER, MAUVE_MAX_SAMPLES, MauveResult, mauve_score
from textwm.metrics.overlap import ROUGE_IMPLS, bleu_1, rouge_l

log = logging.getLogger(__name__)

PREDICTION_FIELDS = ("prediction_raw", "predicted", "generated")
REFERENCE_FIELDS = ("reference", "expected", "ground_truth")
#: Predictions starting with this are generation failures written by the generators.
ERROR_PREFIX = "ERROR"

#: Keys of a dataset summary, in report order.
SUMMARY_KEYS = (
    "num_samples", "num_dropped_errors", "num_skipped_overlong", "num_empty_ref_dropped", "num_duplicates_dropped",
    "exact_match", "semantic_match", "rouge_l_f1", "rouge_impl", "num_rouge_errors", "bleu_1", "self_bleu",
    "self_bleu_num_samples",
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
    """What counts as a kept row, how MAUVE is computed, and whether metrics get bootstrap intervals."""

    drop_errors: bool = True
    #: Drop rows whose prompt was skipped as too long (:data:`SKIPPED_OVERLONG`).
    drop_overlong: bool = True
    drop_empty_ref: bool = True
    dedupe_by_index: bool = True
    #: Reduce references to ``{output, exception}`` (api_bank-style datasets).
    extract_output_field: bool = False
    compute_mauve: bool = True
    mauve_featurizer: str = DEFAULT_FEATURIZER
    mauve_max_samples: int = MAUVE_MAX_SAMPLES
    self_bleu_max_samples: int = SELF_BLEU_MAX_SAMPLES
    on_bad_row: OnError = "fail"
    #: ROUGE-L implementation, one of :data:`textwm.metrics.overlap.ROUGE_IMPLS`.
    rouge_impl: str = "rouge_score"
    #: Bootstrap resamples of the kept rows for ``<metric>_ci95`` intervals; 0 = none (the summary as without it).
    bootstrap: int = 0
    #: Of those, how many also recompute MAUVE (each a k-means over the features: seconds).
    mauve_resamples: int = MAUVE_RESAMPLES
    #: Seed of the resamples (same seed and rows -> same intervals).
    bootstrap_seed: int = 0

    def __post_init__(self) -> None:
        if self.rouge_impl not in ROUGE_IMPLS:
            raise ValueError(f"ScoreOptions.rouge_impl={self.rouge_impl!r}: choose one of {', '.join(ROUGE_IMPLS)}")
        for name in ("bootstrap", "mauve_resamples"):
            if getattr(self, name) < 0:
                raise ValueError(f"ScoreOptions.{name}={getattr(self, name)}: must be >= 0 (bootstrap=0 turns "
                                 "intervals off)")


@dataclass(frozen=True)
class PredictionRow:
    index: Any
    prediction: str
    reference: str
    line: int
    #: The row's ``skipped_overlong`` field (False when absent).
    skipped_overlong: bool = False

    @property
    def is_overlong(self) -> bool:
        """The generator skipped this row's prompt as too long: the ``skipped_overlong`` flag is set or the
        prediction is the marker :data:`textwm.data.markers.SKIPPED_OVERLONG` (the paper's
        ``wedlm/eval_generate.py`` ``run_dataset`` writes both; its ``wedlm/evaluate.py`` drops on the flag)."""
        return self.skipped_overlong or self.prediction == SKIPPED_OVERLONG


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
        overlong = obj.get("skipped_overlong")
        if overlong is not None and not isinstance(overlong, bool):
            raise DataError(f"skipped_overlong must be true/false, got {overlong!r}", field="skipped_overlong")
        return {"index": obj.get("index"), "prediction": _first_field(obj, PREDICTION_FIELDS, "prediction"),
                "reference": _first_field(obj, REFERENCE_FIELDS, "reference"), "skipped_overlong": bool(overlong)}

    report = read_jsonl(path, validate=validate, on_error=on_error)
    rows = [PredictionRow(line=line, **row) for row, line in zip(report.rows, report.line_numbers)]
    return rows, len(report.skipped)


def _keep_rows(rows: Sequence[PredictionRow], options: ScoreOptions
               ) -> tuple[list[tuple[PredictionRow, str, str]], dict[str, int]]:
    """The rows that count, as ``(row, clean prediction, clean reference)``, and the drop counts by summary key.

    Order of the checks: duplicate index, overlong prompt, ERROR prediction, empty reference.
    """
    kept: list[tuple[PredictionRow, str, str]] = []
    seen: set = set()
    drops = dict.fromkeys(("num_duplicates_dropped", "num_skipped_overlong", "num_dropped_errors",
                           "num_empty_ref_dropped"), 0)
    for row in rows:
        if options.dedupe_by_index and row.index is not None:
            key = json.dumps(row.index, sort_keys=True)
            if key in seen:
                drops["num_duplicates_dropped"] += 1
                continue
            seen.add(key)
        if options.drop_overlong and row.is_overlong:
            drops["num_skipped_overlong"] += 1
            continue
        if options.drop_errors and row.prediction.startswith(ERROR_PREFIX):
            drops["num_dropped_errors"] += 1
            continue
        pred = normalize(row.prediction)
        ref = extract_output_field(row.reference) if options.extract_output_field else normalize(row.reference)
        if options.drop_empty_ref and not ref.strip():
            drops["num_empty_ref_dropped"] += 1
            continue
        kept.append((row, pred, ref))
    return kept, drops


def score_rows(rows: Sequence[PredictionRow], options: ScoreOptions = ScoreOptions(), *, name: str = ""
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score prediction rows; returns ``(summary, per-row records)``."""
    kept, drops = _keep_rows(rows, options)
    preds = [p for _, p, _ in kept]
    refs = [r for _, _, r in kept]
    records: list[dict[str, Any]] = []
    n_exact = n_semantic = 0
    rouge_sum = 0.0
    rouge_errors: dict[str, int] = {}
    for row, pred, ref in tqdm(kept, desc=f"scoring {name}".strip(), unit="row", mininterval=2.0,
                               disable=len(kept) < 2000):
        exact = pred == ref
        semantic = _semantic_match(pred, ref)
        rouge, rouge_error = rouge_l(pred, ref, options.rouge_impl)
        n_exact += exact
        n_semantic += semantic
        rouge_sum += rouge
        record = {"index": row.index, "prediction_raw": row.prediction, "prediction_clean": pred,
                  "reference_raw": row.reference, "reference_clean": ref, "match": exact,
                  "semantic_match": semantic, "rouge_l_f1": rouge}
        if rouge_error is not None:
            record["rouge_l_error"] = rouge_error
            kind = rouge_error.partition(":")[0]
            rouge_errors[kind] = rouge_errors.get(kind, 0) + 1
        records.append(record)

    n = len(kept)
    if n == 0:
        log.warning("%s: no rows left to score (dropped: %s)", name or "dataset",
                    ", ".join(f"{k}={v}" for k, v in drops.items()))
    if rouge_errors:
        log.warning("%s: %s ROUGE-L failed on %d of %d rows (%s), each scored 0.0 as the paper's evaluate.py does; "
                    "see rouge_l_error in the scored rows", name or "dataset", options.rouge_impl,
                    sum(rouge_errors.values()), n, ", ".join(f"{k}: {v}" for k, v in sorted(rouge_errors.items())))
    sb, sb_n = self_bleu(preds, max_samples=options.self_bleu_max_samples)
    summary: dict[str, Any] = {
        "num_samples": n,
        "num_dropped_errors": drops["num_dropped_errors"],
        "num_skipped_overlong": drops["num_skipped_overlong"],
        "num_empty_ref_dropped": drops["num_empty_ref_dropped"],
        "num_duplicates_dropped": drops["num_duplicates_dropped"],
        "exact_match": n_exact / n if n else None,
        "semantic_match": n_semantic / n if n else None,
        "rouge_l_f1": rouge_sum / n if n else None,
        "rouge_impl": options.rouge_impl,
        "num_rouge_errors": sum(rouge_errors.values()),
        "bleu_1": bleu_1(preds, refs),
        "self_bleu": sb,
        "self_bleu_num_samples": sb_n,
        "distinct_1": distinct_n(preds, 1),
        "distinct_2": distinct_n(preds, 2),
        "mauve": None,
        "mauve_featurizer": options.mauve_featurizer if options.compute_mauve else None,
        "mauve_num_samples": 0,
    }
    mauve: MauveResult | None = None
    if options.compute_mauve:
        started = time.perf_counter()
        mauve = mauve_score(preds, refs, featurizer=options.mauve_featurizer, max_samples=options.mauve_max_samples)
        summary["mauve"], summary["mauve_num_samples"] = mauve.score, mauve.num_samples
        log.info("%s: MAUVE over %d rows in %.1fs", name or "dataset", mauve.num_samples,
                 time.perf_counter() - started)
    if options.bootstrap:
        started = time.perf_counter()
        summary.update(bootstrap_intervals(ScoredRows.from_records(records), resamples=options.bootstrap,
                                           seed=options.bootstrap_seed, mauve=mauve,
                                           self_bleu_max_samples=options.self_bleu_max_samples,
                                           mauve_resamples=options.mauve_resamples))
        log.info("%s: bootstrap intervals, %d resamples (MAUVE %d), in %.1fs", name or "dataset", options.bootstrap,
                 summary["bootstrap"]["mauve_resamples"], time.perf_counter() - started)
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
