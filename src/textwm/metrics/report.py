"""Reports over scored datasets: ``eval_summary.json``, a markdown table and a bar chart (PNG).

A *run* is one scorer output folder (``{dataset: summary}``); a comparison puts several runs
(e.g. ``ar`` and ``sdar``) side by side, one column group per ``run/dataset``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from textwm._optional import require
from textwm.data.jsonl import DataError, atomic_write, read_json, write_json
from textwm.metrics.scorer import METRIC_LABELS

log = logging.getLogger(__name__)

SUMMARY_FILE = "eval_summary.json"
Summaries = Mapping[str, Mapping[str, Any]]


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


#: Summary keys of dropped-row counts and their words in the markdown notes.
DROP_LABELS = {"num_duplicates_dropped": "duplicate indices", "num_skipped_overlong": "overlong prompts",
               "num_dropped_errors": "ERROR predictions", "num_empty_ref_dropped": "empty references",
               "num_bad_rows_skipped": "malformed rows"}
ROUGE_IMPL_LABELS = {"rouge_score": "rouge_score (Google rouge-score, rougeL F-measure)",
                     "pltrdy": "pltrdy (PyPI rouge, rouge-l f, as the paper's evaluate.py)"}


def _drop_notes(summaries: Summaries) -> list[str]:
    """One note per dataset that lost rows: ``name: 3 overlong prompts, 1 ERROR predictions dropped``."""
    notes = []
    for name, summary in summaries.items():
        parts = [f"{summary[k]} {label}" for k, label in DROP_LABELS.items() if summary.get(k)]
        if parts:
            notes.append(f"{name}: dropped {', '.join(parts)}.")
    return notes


def _rouge_note(summaries: Summaries) -> str:
    """Which ROUGE-L implementation(s) the table's figures come from (summaries older than the choice: rouge_score)."""
    impls = sorted({s.get("rouge_impl", "rouge_score") for s in summaries.values()})
    note = "ROUGE-L: " + "; ".join(ROUGE_IMPL_LABELS.get(i, i) for i in impls)
    if len(impls) > 1:
        note += " (mixed: ROUGE-L values are not comparable across these)"
    failed = {name: s["num_rouge_errors"] for name, s in summaries.items() if s.get("num_rouge_errors")}
    if failed:
        note += "; rows where the library failed, scored 0.0: " + ", ".join(f"{k}: {v}" for k, v in failed.items())
    return note + "."


def _cell(summary: Mapping[str, Any], metric: str) -> str:
    """The metric, with its 95% interval in brackets where the summary has one (``bootstrap`` > 0)."""
    interval = summary.get(f"{metric}_ci95")
    if not interval:
        return _fmt(summary.get(metric))
    return f"{_fmt(summary.get(metric))} [{interval[0]:.4f}, {interval[1]:.4f}]"


def _bootstrap_note(summaries: Summaries) -> str | None:
    """How the bracketed intervals were made, per dataset (None when no summary has them)."""
    runs = {name: s["bootstrap"] for name, s in summaries.items() if s.get("bootstrap")}
    if not runs:
        return None
    sizes = "; ".join(f"{name}: {b['resamples']} resamples, MAUVE {b['mauve_resamples']}, seed {b['seed']}"
                      for name, b in runs.items())
    return ("[lo, hi]: 95% percentile bootstrap intervals over the kept rows (Distinct-n and Self-BLEU through "
            "their jackknife influence, MAUVE shifted by its bootstrap bias; see textwm.metrics.bootstrap); "
            f"{sizes}.")


def markdown_table(summaries: Summaries, *, first_column: str = "dataset") -> str:
    """One row per dataset (or ``run/dataset``), one column per metric (with its 95% interval where there is one)."""
    header = [first_column, "N", *METRIC_LABELS.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, summary in summaries.items():
        cells = [name, _fmt(summary.get("num_samples")), *(_cell(summary, k) for k in METRIC_LABELS)]
        lines.append("| " + " | ".join(cells) + " |")
    featurizers = {s.get("mauve_featurizer") for s in summaries.values() if s.get("mauve") is not None}
    notes = ["N = rows kept after dropping duplicate indices, overlong prompts, errors and empty references.",
             *_drop_notes(summaries), _rouge_note(summaries)]
    if featurizers:
        sizes = ", ".join(f"{name}: {s.get('mauve_num_samples')}" for name, s in summaries.items()
                          if s.get("mauve") is not None)
        notes.append(f"MAUVE featuriser: {', '.join(sorted(featurizers))}; rows per MAUVE estimate: {sizes} "
                     "(comparable only at equal featuriser and size).")
    bootstrap = _bootstrap_note(summaries)
    if bootstrap:
        notes.append(bootstrap)
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def bar_chart(summaries: Summaries, path: str | Path, *, title: str) -> Path:
    """Grouped bars: one group per metric, one bar per dataset/run, 95% intervals as error bars where present.
    Missing metrics are left out."""
    matplotlib = require("matplotlib", extra="metrics")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", extra="metrics")
    names = list(summaries)
    metrics = list(METRIC_LABELS)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.4 * len(metrics) + 0.4 * len(names)), 4.8))
    for j, name in enumerate(names):
        xs, ys, errors = [], [], []
        for i, metric in enumerate(metrics):
            value = summaries[name].get(metric)
            if value is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(value)
                lo, hi = summaries[name].get(f"{metric}_ci95") or (value, value)
                errors.append((max(0.0, value - lo), max(0.0, hi - value)))
        # 95% intervals as error bars where the summaries have them (bootstrap > 0).
        yerr = list(zip(*errors)) if any(e != (0.0, 0.0) for e in errors) else None
        bars = ax.bar(xs, ys, width=width, label=name, yerr=yerr, capsize=2 if yerr else 0)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([METRIC_LABELS[m].replace(" (lower = more diverse)", "\n(lower = diverse)") for m in metrics],
                       fontsize=9)
    ax.set_ylim(0, 1.25)  # headroom for the legend above the bars
    ax.set_ylabel("score (0-1)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", ncol=min(len(names), 4))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, mode="wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return Path(path)


def write_report(summaries: Summaries, output_dir: str | Path, *, stem: str = "eval_summary",
                 title: str = "World-model scores", first_column: str = "dataset") -> dict[str, Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``output_dir``."""
    out = Path(output_dir)
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "chart": out / f"{stem}.png"}
    write_json(paths["json"], dict(summaries))
    with atomic_write(paths["markdown"]) as f:
        f.write(f"# {title}\n\n" + markdown_table(summaries, first_column=first_column))
    if summaries:
        bar_chart(summaries, paths["chart"], title=title)
    else:
        del paths["chart"]
    return paths


def load_run(directory: str | Path) -> dict[str, dict[str, Any]]:
    """Read a scorer output folder's ``eval_summary.json``."""
    path = Path(directory) / SUMMARY_FILE
    if not path.exists():
        raise DataError(f"no {SUMMARY_FILE} here; score the run first "
                        f"(evaluate.py --input-dir <predictions> --output-dir {directory} ...)", path=directory)
    data = read_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise DataError("must map dataset names to summaries", path=path)
    return data


def parse_run_spec(spec: str) -> tuple[str, Path]:
    """``LABEL=DIR`` or ``DIR`` (label = the folder's name)."""
    label, sep, directory = spec.partition("=")
    if not sep:
        directory = spec
        label = Path(spec.rstrip("/")).name
    if not label:
        raise ValueError(f"--compare entry {spec!r} has an empty label")
    return label, Path(directory)


def compare_runs(specs: list[str], output_dir: str | Path, *, title: str = "World-model comparison"
                 ) -> dict[str, Path]:
    """Side-by-side table and chart of several scored runs; writes ``comparison.{json,md,png}``."""
    combined: dict[str, dict[str, Any]] = {}
    for spec in specs:
        label, directory = parse_run_spec(spec)
        for dataset, summary in load_run(directory).items():
            key = f"{label}/{dataset}"
            if key in combined:
                raise ValueError(f"two --compare runs are labelled {label!r}; give them LABEL=DIR names")
            combined[key] = summary
    return write_report(combined, output_dir, stem="comparison", title=title, first_column="run/dataset")
