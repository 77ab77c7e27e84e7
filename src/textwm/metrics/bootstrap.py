"""Percentile-bootstrap 95% intervals for the scorer's metrics, and for differences between two systems.

**What is resampled.** The kept rows (a row: one prediction and its reference) are drawn with replacement,
``resamples`` times, from one fixed-seed generator (:func:`resample_indices`, ``[B, N]``). The same draws serve
every metric of a dataset and both systems of a paired difference, so all intervals come from the same resamples
and a difference A - B is taken resample by resample. Rows are the unit because rows are what was sampled: held-out
transitions of the environment. The figures say how much a metric would move on another draw of as many rows.

**Why percentile intervals** (the 2.5th and 97.5th percentiles of the metric over the resamples; Efron &
Tibshirani 1993, ch. 13): no normal approximation, so intervals stay inside the metric's range (EM near 0 or 1,
MAUVE) and follow its skew; a constant metric gets a zero-width interval. sacrebleu's ``--confidence`` reports
the same kind for BLEU.

**How each metric is recomputed on a resample**, each by the definition in its own module:

* ``exact_match``, ``semantic_match``, ``rouge_l_f1``: the mean of the resampled per-row scores.
* ``bleu_1``: corpus BLEU-1 of the resampled rows, exactly: sacrebleu's per-row statistics
  (:func:`~textwm.metrics.overlap.bleu_1_row_stats`, computed once) summed over the resampled rows and scored by
  :func:`~textwm.metrics.overlap.bleu_1_from_stats`, the two halves of :func:`~textwm.metrics.overlap.bleu_1`
  (sacrebleu's own bootstrap, ``sacrebleu/significance.py::_bootstrap_resample``, works the same way).
* ``distinct_1``, ``distinct_2``, ``self_bleu``: jackknife-linearised. A resample repeats about a third of its rows,
  and for these corpus-level metrics a repeat is no new draw: it brings no new n-gram type and is a perfect
  leave-one-out reference for its copy. Recomputed on resamples of 1,000 varied synthetic rows, Distinct-2 fell
  from 0.67 to 0.45 and Self-BLEU rose from 0.17 to 0.69: that measures the repeats, not the sampling error.
  Instead each row's influence comes from the exact leave-one-out values
  (:func:`~textwm.metrics.diversity.distinct_n_jackknife`, :func:`~textwm.metrics.diversity.self_bleu_jackknife`),
  ``IF_i = (m - 1) * (value - value without row i)``, and a resample with row counts ``w`` scores
  ``value + sum_i w_i * (IF_i - mean IF) / sum_i w_i``: the bootstrap of the metric's first-order (jackknife)
  expansion, centred on the point estimate. Self-BLEU keeps the scorer's cap: only the rows of its fixed-seed
  sample carry weight. On synthetic corpora of 1,000 rows (Zipf-distributed words, vocabularies of 2,000 and
  50,000) the spread matched that over 20 independent corpora: standard deviations, resamples vs independent
  corpora, Distinct-2 0.0048 vs 0.0050 and 0.0035 vs 0.0037, Self-BLEU 0.0030 vs 0.0028 and 0.0019 vs 0.0018.
* ``mauve``: recomputed by :func:`~textwm.metrics.mauve.mauve_from_features` (the scorer's MAUVE) on the resampled
  rows of the features the scorer already computed, P and Q rows resampled together, for the first
  ``mauve_resamples`` draws only: each is a k-means clustering, seconds where the rest takes microseconds.
  Resampling adds its own noise to MAUVE's histograms, which lowers MAUVE: on 1,000 synthetic observations
  (MiniLM features) MAUVE was 0.92 and its resamples 0.12 lower on average. So its interval is the percentile
  interval shifted by the bootstrap bias estimate ``mean(resampled MAUVE) - MAUVE`` (reported as ``mauve_bias``),
  clipped to [0, 1]: there [0.85, 0.98], while MAUVE over 15 independent draws of 1,000 rows from the same
  generators had a standard deviation of 0.023-0.027 (the interval errs wide). It is an interval for MAUVE at this
  N and featuriser, the only setting in which MAUVE compares anyway.

Cost, 1,000 rows and 1,000 resamples on two shared CPU cores: 0.5-1 s without MAUVE (Self-BLEU's jackknife is
most of it; the per-row metrics take milliseconds), plus 50 MAUVE resamples at 5-10 s each (~6 min measured).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm._optional import require
from textwm.data.jsonl import read_jsonl
from textwm.metrics.diversity import (
    SELF_BLEU_MAX_SAMPLES,
    distinct_n,
    distinct_n_jackknife,
    self_bleu_jackknife,
)
from textwm.metrics.mauve import mauve_from_features
from textwm.metrics.overlap import bleu_1_from_stats, bleu_1_row_stats

log = logging.getLogger(__name__)

#: Two-sided coverage of every interval.
CI_LEVEL = 0.95
DEFAULT_SEED = 0
#: MAUVE resamples by default: each costs a k-means over the features (seconds), the other metrics microseconds.
MAUVE_RESAMPLES = 50
#: Summary key -> field of ``<name>_scored.jsonl`` for the metrics that are a mean of per-row scores.
PER_ROW_FIELDS = {"exact_match": "match", "semantic_match": "semantic_match", "rouge_l_f1": "rouge_l_f1"}
#: Metrics :func:`replicates` (and so :func:`paired_difference`) computes; MAUVE needs features, see
#: :func:`mauve_replicates`.
ROW_METRICS = (*PER_ROW_FIELDS, "bleu_1", "self_bleu", "distinct_1", "distinct_2")
#: Every metric that gets a ``<metric>_ci95`` in a summary.
METRICS = (*ROW_METRICS, "mauve")


def _np():
    return require("numpy", extra="metrics")


@dataclass(frozen=True)
class ScoredRows:
    """One system's kept rows as the scorer scored them: clean texts and per-row scores, in row order."""

    predictions: tuple[str, ...]
    references: tuple[str, ...]
    #: Summary key of a per-row metric (:data:`PER_ROW_FIELDS`) -> its scores ``[N]``.
    per_row: Mapping[str, tuple[float, ...]]
    #: The rows' ``index`` values, for aligning two systems (None entries where a row had none).
    index: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.predictions)
        lengths = {"references": len(self.references), **{k: len(v) for k, v in self.per_row.items()}}
        if self.index:
            lengths["index"] = len(self.index)
        bad = {k: v for k, v in lengths.items() if v != n}
        if bad:
            raise ValueError(f"ScoredRows: {n} predictions but " + ", ".join(f"{v} {k}" for k, v in bad.items()))

    def __len__(self) -> int:
        return len(self.predictions)

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> ScoredRows:
        """From the scorer's per-row records (the rows of ``<name>_scored.jsonl``)."""
        return cls(predictions=tuple(r["prediction_clean"] for r in records),
                   references=tuple(r["reference_clean"] for r in records),
                   per_row={key: tuple(float(r[name]) for r in records) for key, name in PER_ROW_FIELDS.items()},
                   index=tuple(r.get("index") for r in records))

    @classmethod
    def from_file(cls, path: str | Path) -> ScoredRows:
        """Read a ``<name>_scored.jsonl`` that :func:`textwm.metrics.scorer.score_file` wrote."""

        return cls.from_records(read_jsonl(path).rows)


def resample_indices(n: int, resamples: int, seed: int = DEFAULT_SEED):
    """Row indices of ``resamples`` draws of ``n`` rows with replacement, ``[B, n]`` int64, from ``seed``."""
    np = _np()
    if n < 1 or resamples < 1:
        raise ValueError(f"need n >= 1 rows and resamples >= 1, got n={n}, resamples={resamples}")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def row_counts(indices, n: int):
    """How often each row is drawn in each resample: ``[B, K]`` row indices in ``[0, n)`` -> ``[B, n]`` counts."""
    np = _np()
    b = indices.shape[0]
    flat = (indices + n * np.arange(b)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n)


def percentile_interval(values) -> list[float]:
    """``[lo, hi]``: the 2.5th and 97.5th percentiles of resampled values ``[B]`` (numpy's linear interpolation)."""
    np = _np()
    tail = 100 * (1 - CI_LEVEL) / 2
    lo, hi = np.percentile(np.asarray(values, dtype=np.float64), [tail, 100 - tail])
    return [float(lo), float(hi)]


def _linearised(value: float, loo: Sequence[float | None], weights) -> tuple[float | None, Any]:
    """``(value, value + w @ (IF - mean IF) / w.sum() per resample)``: ``loo`` ``[m]`` leave-one-out values,
    ``weights`` ``[B, m]`` row counts -> ``[B]``; ``(None, None)`` when a leave-one-out value is undefined
    (a single row, or one row holding every n-gram)."""
    np = _np()
    if any(v is None for v in loo):
        return None, None
    m = len(loo)
    influence = (m - 1) * (value - np.asarray(loo, dtype=np.float64))
    totals = weights.sum(axis=1)
    shift = weights @ (influence - influence.mean()) / np.maximum(totals, 1)
    return value, value + np.where(totals > 0, shift, 0.0)


def replicates(rows: ScoredRows, indices, metrics: Sequence[str] = ROW_METRICS, *,
               self_bleu_max_samples: int = SELF_BLEU_MAX_SAMPLES) -> dict[str, Any]:
    """Each metric recomputed on each resample (see the module docstring for how), as ``[B]`` float64 arrays.

    Args:
        rows: the kept rows, N of them.
        indices: ``[B, N]`` row indices (:func:`resample_indices`).
        metrics: names from :data:`ROW_METRICS`.
        self_bleu_max_samples: the scorer's Self-BLEU cap (its fixed-seed sample is the one resampled).

    Returns ``{metric: [B] array or None}``, None where the metric is undefined on these rows.
    """
    return {m: values for m, (_, values) in
            _estimates(rows, indices, metrics, self_bleu_max_samples=self_bleu_max_samples).items()}


def _estimates(rows: ScoredRows, indices, metrics: Sequence[str], *, self_bleu_max_samples: int
               ) -> dict[str, tuple[float | None, Any]]:
    """``{metric: (value on all rows, [B] values on the resamples)}``, ``(None, None)`` where undefined."""
    np = _np()
    unknown = set(metrics) - set(ROW_METRICS)
    if unknown:
        raise ValueError(f"no resampling for {', '.join(sorted(unknown))}; choose from {', '.join(ROW_METRICS)}")
    n = len(rows)
    if indices.ndim != 2 or indices.shape[1] != n:
        raise ValueError(f"indices must be [B, {n}] for {n} rows, got shape {tuple(indices.shape)}")
    weights = row_counts(indices, n)
    out: dict[str, tuple[float | None, Any]] = {}
    for metric in metrics:
        if n == 0:
            out[metric] = (None, None)
        elif metric in PER_ROW_FIELDS:
            scores = np.asarray(rows.per_row[metric], dtype=np.float64)
            mean = float(scores.mean())
            # Centred, so that a constant metric resamples to exactly its value.
            out[metric] = (mean, mean + weights @ (scores - mean) / n)
        elif metric == "bleu_1":
            stats = np.asarray(bleu_1_row_stats(rows.predictions, rows.references), dtype=np.int64)
            out[metric] = (bleu_1_from_stats(stats.sum(axis=0)),
                           np.array([bleu_1_from_stats(s) for s in weights @ stats], dtype=np.float64))
        elif metric == "self_bleu":
            jack = self_bleu_jackknife(rows.predictions, max_samples=self_bleu_max_samples)
            out[metric] = (None, None) if jack is None else _linearised(jack[0], jack[2], weights[:, jack[1]])
        else:
            order = int(metric.rsplit("_", 1)[1])
            value = distinct_n(rows.predictions, order)
            out[metric] = (None, None) if value is None else _linearised(
                value, distinct_n_jackknife(rows.predictions, order), weights)
    return out


def mauve_replicates(p_features, q_features, indices):
    """MAUVE recomputed on resampled feature rows: ``p_features``, ``q_features`` ``[M, D]`` (row ``i`` of both
    is one kept row), ``indices`` ``[B, M]`` -> ``[B]`` float64. Seconds per resample (a k-means)."""
    np = _np()
    return np.array([mauve_from_features(p_features[i], q_features[i]) for i in indices], dtype=np.float64)


def bootstrap_intervals(rows: ScoredRows, *, resamples: int, seed: int = DEFAULT_SEED,
                        self_bleu_max_samples: int = SELF_BLEU_MAX_SAMPLES, mauve: Any = None,
                        mauve_resamples: int = MAUVE_RESAMPLES) -> dict[str, Any]:
    """The summary entries of one scored dataset: ``<metric>_ci95`` for each of :data:`METRICS` and ``bootstrap``.

    Args:
        rows: the kept rows, N of them.
        resamples: B, draws of N rows with replacement (>= 1).
        seed: seeds the draws (same seed, rows and options -> same intervals).
        self_bleu_max_samples: the scorer's Self-BLEU cap.
        mauve: the scorer's :class:`~textwm.metrics.mauve.MauveResult` (its features are resampled), or None.
        mauve_resamples: MAUVE's own, smaller number of resamples (the first of the same draws when MAUVE scored
            every row; drawn within its fixed-seed sample otherwise).

    Returns ``{"exact_match_ci95": [lo, hi], ..., "bootstrap": {"resamples", "mauve_resamples", "seed",
    "mauve_bias"}}``; an interval is None where the metric is None.

    Cost: see the module docstring (about a second for 1,000 rows and 1,000 resamples, plus MAUVE's resamples at
    seconds each).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if mauve_resamples < 0:
        raise ValueError(f"mauve_resamples must be >= 0, got {mauve_resamples}")
    out: dict[str, Any] = {f"{m}_ci95": None for m in METRICS}
    info = {"resamples": resamples, "mauve_resamples": 0, "seed": seed, "mauve_bias": None}
    n = len(rows)
    if n == 0:
        return {**out, "bootstrap": info}
    indices = resample_indices(n, resamples, seed)
    for metric, values in replicates(rows, indices, self_bleu_max_samples=self_bleu_max_samples).items():
        if values is not None:
            out[f"{metric}_ci95"] = percentile_interval(values)
    if mauve is not None and mauve.score is not None and mauve.p_features is not None and mauve_resamples:
        m = len(mauve.rows)
        count = min(mauve_resamples, resamples)
        mauve_indices = indices[:count] if m == n else resample_indices(m, count, seed)
        values = mauve_replicates(mauve.p_features, mauve.q_features, mauve_indices)
        bias = float(values.mean()) - mauve.score
        lo, hi = percentile_interval(values - bias)
        out["mauve_ci95"] = [max(0.0, lo), min(1.0, hi)]
        info.update(mauve_resamples=count, mauve_bias=bias)
    return {**out, "bootstrap": info}


@dataclass(frozen=True)
class PairedDifference:
    """``metric(A) - metric(B)`` on the same rows, and its 95% percentile interval over shared resamples."""

    metric: str
    difference: float
    ci95: list[float]
    resamples: int
    num_rows: int

    @property
    def excludes_zero(self) -> bool:
        """The interval lies on one side of 0: at this level, A and B differ on this metric."""
        return self.ci95[0] > 0 or self.ci95[1] < 0


def align_by_index(a: ScoredRows, b: ScoredRows) -> tuple[ScoredRows, ScoredRows]:
    """The rows of both systems that share an ``index``, in A's order (rows without one cannot be matched)."""
    if not a.index or not b.index or None in a.index or None in b.index:
        raise ValueError("align_by_index needs an index on every row of both systems")
    position_in_b = {_key(i): k for k, i in enumerate(b.index)}
    pairs = [(k, position_in_b[_key(i)]) for k, i in enumerate(a.index) if _key(i) in position_in_b]
    if len(pairs) < len(a) or len(pairs) < len(b):
        log.info("aligned %d rows (A had %d, B %d)", len(pairs), len(a), len(b))
    return _take(a, [k for k, _ in pairs]), _take(b, [k for _, k in pairs])


def _key(index: Any) -> str:
    return json.dumps(index, sort_keys=True)


def _take(rows: ScoredRows, keep: Sequence[int]) -> ScoredRows:
    return ScoredRows(predictions=tuple(rows.predictions[k] for k in keep),
                      references=tuple(rows.references[k] for k in keep),
                      per_row={m: tuple(v[k] for k in keep) for m, v in rows.per_row.items()},
                      index=tuple(rows.index[k] for k in keep) if rows.index else ())


def paired_difference(a: ScoredRows, b: ScoredRows, metric: str, *, resamples: int = 1000,
                      seed: int = DEFAULT_SEED, self_bleu_max_samples: int = SELF_BLEU_MAX_SAMPLES
                      ) -> PairedDifference:
    """95% interval of ``metric(A) - metric(B)`` for two systems scored on the same rows.

    The row indices are drawn once (``[B, N]``) and applied to both systems, so what the rows have in common
    (easy and hard transitions) cancels out of the difference. Rows must be aligned: row ``k`` of A and of B is
    the same held-out transition (:func:`align_by_index` makes them so). ``metric`` is one of :data:`ROW_METRICS`.
    """
    if len(a) != len(b):
        raise ValueError(f"A has {len(a)} rows and B {len(b)}; pair them first (align_by_index)")
    if a.index and b.index and a.index != b.index:
        raise ValueError("A's and B's rows are not the same rows in the same order; pair them first (align_by_index)")
    if len(a) == 0:
        raise ValueError("no rows to compare")
    indices = resample_indices(len(a), resamples, seed)
    value_a, values_a = _estimates(a, indices, [metric], self_bleu_max_samples=self_bleu_max_samples)[metric]
    value_b, values_b = _estimates(b, indices, [metric], self_bleu_max_samples=self_bleu_max_samples)[metric]
    if value_a is None or value_b is None:
        raise ValueError(f"{metric} is undefined on A's or B's rows")
    return PairedDifference(metric, value_a - value_b, percentile_interval(values_a - values_b), resamples, len(a))
