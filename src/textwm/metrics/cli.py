"""Command line of the scorer, shared by ``sdar/``, ``wedlm/`` and ``llm_training/evaluate.py`` (``textwm score``).

A config as everywhere (:mod:`textwm.config`): :class:`ScoreConfig`'s flags (every flag of the paper's three
evaluate.py), ``--config FILE.yaml``. ``--help`` never imports torch. Scoring needs no decoder: a command that
generates its predictions first (``llm_training/evaluate.py --api-url``) passes a :class:`PredictionSource`, whose
config class adds its flags to the scorer's.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from textwm._optional import MissingDependencyError, require
from textwm.cli_checks import check_output_dir
from textwm.config import ConfigCLI, ConfigError, field_default, option
from textwm.data.jsonl import DataError
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.metrics import report
from textwm.metrics.bootstrap import MAUVE_RESAMPLES
from textwm.metrics.diversity import SELF_BLEU_MAX_SAMPLES
from textwm.metrics.mauve import DEFAULT_FEATURIZER, MAUVE_MAX_SAMPLES
from textwm.metrics.overlap import ROUGE_IMPLS
from textwm.metrics.scorer import ScoreOptions, read_predictions, score_and_write

DESCRIPTION = """Score world-model predictions: exact/semantic match, ROUGE-L, BLEU-1, Self-BLEU,
Distinct-1/2 and MAUVE. Reads <input-dir>/<file-pattern> for each dataset (rows with
prediction_raw|predicted|generated and reference|expected|ground_truth), writes
<output-dir>/<name>_scored.jsonl, eval_summary.json, eval_summary.md and eval_summary.png.
Accepts every flag of the paper's sdar/, wedlm/ and llm_training/evaluate.py."""


@dataclass
class ScoreConfig:
    """The scorer's flags."""

    output_dir: str = option(help="where scored rows and the summary go")
    input_dir: str = option("", "folder with the prediction files (with --api-url: default --output-dir)")
    datasets: list[str] = option(help="dataset names to score", default_factory=list, metavar="NAME")
    file_pattern: str = option("{name}_outputs.jsonl", "prediction file name inside --input-dir")
    keep_errors: bool = option(False, "keep rows whose prediction starts with 'ERROR'")
    keep_overlong: bool = option(False, f"keep rows whose prompt was too long to generate (prediction "
                                        f"{SKIPPED_OVERLONG} or skipped_overlong: true; default: drop and count them)")
    keep_empty_ref: bool = option(False, "keep rows whose normalised reference is empty")
    dedupe: bool = option(True, "de-duplicate rows by 'index', the first wins (--no-dedupe: keep them all)")
    extract_output_field: list[str] = option(help="datasets whose references are reduced to {output, exception} "
                                                  "(api_bank style)", default_factory=list, metavar="NAME")
    rouge_impl: str = option("rouge_score", "ROUGE-L of Google rouge-score, or of pltrdy's rouge package computed as "
                                            "the paper's evaluate.py does (per row, failures scored 0.0 and "
                                            "counted; slow on long rows)", choices=ROUGE_IMPLS)
    mauve: bool = option(True, "compute MAUVE (--no-mauve: skip it, mauve: null in the summary)")
    mauve_featurizer: str = option(DEFAULT_FEATURIZER, "the offline default, a sentence-transformers folder, or any "
                                                       "HF model id or folder")
    mauve_max_samples: int = option(MAUVE_MAX_SAMPLES, "rows per MAUVE estimate, a fixed-seed sample above it; 0 = all")
    self_bleu_max_samples: int = option(SELF_BLEU_MAX_SAMPLES, "predictions per Self-BLEU estimate, 0 = all")
    bootstrap: int = option(0, "add a 95% percentile bootstrap interval to every metric (<metric>_ci95 in the "
                               "summary) from N resamples of the kept rows; 1000 is usual, 0 = off", metavar="N")
    mauve_resamples: int = option(MAUVE_RESAMPLES, "of those, resamples that also recompute MAUVE (seconds each)",
                                  metavar="M")
    bootstrap_seed: int = option(0, "seed of the resamples")
    on_bad_row: str = option("fail", "a malformed prediction row: stop, or skip and count it",
                             choices=("fail", "skip"))
    compare: list[str] = option(help="instead of scoring: put several scored output folders side by side "
                                     "(comparison.md/.png/.json in --output-dir)", default_factory=list,
                                metavar="[LABEL=]DIR")
    title: str | None = option(None, "title of the table and chart")

    def __post_init__(self) -> None:
        for name in ("mauve_max_samples", "self_bleu_max_samples", "bootstrap", "mauve_resamples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", key="--" + name.replace("_", "-"))


class PredictionSource(Protocol):
    """What writes the prediction files before they are scored: the config class of its flags (``--api-url`` among
    them; added to the scorer's as ``generation``) and how it writes them."""

    description: str                 # appended to the scorer's --help
    config_class: type
    #: The field of ``config_class`` whose value asks for generation (``api_url``), and the fields that only shape it.
    trigger: str
    flags: tuple[str, ...]

    def __call__(self, config: Any, score: ScoreConfig) -> None:
        """Write ``score.datasets``' prediction files into ``score.input_dir`` (``config``: its flags)."""


def config_class(predictions: PredictionSource | None) -> type:
    """The scorer's config class, with the prediction source's flags as its ``generation`` field when there is one."""
    if predictions is None:
        return ScoreConfig
    flags = predictions.config_class
    generation = option(help="generation of the predictions first", default_factory=flags)
    return dataclasses.make_dataclass("ScoreAndGenerateConfig", [("generation", flags, generation)],
                                      bases=(ScoreConfig,))


def check(c: ScoreConfig, predictions: PredictionSource | None) -> None:
    """What the flags must satisfy together (ConfigError naming them); fills ``--input-dir`` from ``--output-dir``
    when the predictions are generated first."""
    generate = predictions is not None and bool(getattr(c.generation, predictions.trigger))
    if c.compare:
        if c.input_dir or c.datasets or generate:
            raise ConfigError("--compare reads already scored folders; use it without --input-dir/--datasets/"
                              "--api-url")
        return
    if not c.datasets:
        raise ConfigError("--datasets is required (or use --compare)")
    if generate:
        c.input_dir = c.input_dir or c.output_dir
    if not c.input_dir:
        raise ConfigError("--input-dir is required" + (" (or give --api-url to generate the predictions first)"
                                                       if predictions is not None else ""))
    if predictions is not None and not generate:
        _warn_generation_flags_unused(c, predictions)
    unknown = set(c.extract_output_field) - set(c.datasets)
    if unknown:
        # The paper's READMEs say "add --extract-output-field api_bank" under a command scoring only `test`;
        # its scorer ignores the name then, so we accept it too, but say so.
        print(f"warning: --extract-output-field names datasets not in --datasets: {', '.join(sorted(unknown))} "
              "(ignored)", file=sys.stderr)


def _warn_generation_flags_unused(c: Any, predictions: PredictionSource) -> None:
    """One stderr line when generation flags were set without --api-url (they only shape the requests)."""
    defaults = {f.name: f for f in dataclasses.fields(c.generation)}
    ignored = [f"--{name.replace('_', '-')}" for name in predictions.flags
               if getattr(c.generation, name) != field_default(defaults[name])]
    if ignored:
        print(f"notice: {', '.join(ignored)} only apply with --api-url (generation); ignored, scoring "
              f"{c.input_dir} as it is", file=sys.stderr)


def main(argv: list[str] | None = None, *, predictions: PredictionSource | None = None,
         prog: str | None = None) -> int:
    """Score predictions; with ``predictions`` (e.g. :class:`textwm.generation.api.ApiPredictions`) its flags
    are added and, when given, it writes the prediction files first."""
    cls = config_class(predictions)
    description = DESCRIPTION + ("\n\n" + predictions.description if predictions is not None else "")
    parsed = ConfigCLI(cls, prog=prog, description=description, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    c = parsed[0]
    try:
        check(c, predictions)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        check_output_dir(c.output_dir, "--output-dir")
        if c.compare:
            paths = report.compare_runs(c.compare, c.output_dir, title=c.title or "World-model comparison")
            print(Path(paths["markdown"]).read_text())
            print("wrote " + ", ".join(str(v) for v in paths.values()))
            return 0
        if c.rouge_impl == "pltrdy":
            require("rouge", extra="metrics", package="rouge")  # fail before hours of generation or scoring
        if predictions is not None and getattr(c.generation, predictions.trigger):
            predictions(c.generation, c)
        return _score(c)
    except (DataError, ConfigError, MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _score(c: ScoreConfig) -> int:
    files = {name: Path(c.input_dir) / c.file_pattern.format(name=name) for name in c.datasets}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise DataError(f"prediction file(s) not found: {', '.join(missing)}", path=c.input_dir)
    # Read (and validate) every file before writing anything: a bad row in the last dataset
    # must not leave the first ones scored without a summary.
    loaded = {name: read_predictions(path, on_error=c.on_bad_row) for name, path in files.items()}
    # The summary indexes the scored files of one run: an earlier run's goes first, so an interrupted run leaves new
    # scored files without a summary, never beside an old one.
    for suffix in (".json", ".md", ".png"):
        (Path(c.output_dir) / f"eval_summary{suffix}").unlink(missing_ok=True)
    results = {}
    for name, (rows, n_bad) in loaded.items():
        options = ScoreOptions(drop_errors=not c.keep_errors, drop_overlong=not c.keep_overlong,
                               drop_empty_ref=not c.keep_empty_ref, dedupe_by_index=c.dedupe,
                               rouge_impl=c.rouge_impl, extract_output_field=name in c.extract_output_field,
                               compute_mauve=c.mauve, mauve_featurizer=c.mauve_featurizer,
                               mauve_max_samples=c.mauve_max_samples, self_bleu_max_samples=c.self_bleu_max_samples,
                               on_bad_row=c.on_bad_row, bootstrap=c.bootstrap, mauve_resamples=c.mauve_resamples,
                               bootstrap_seed=c.bootstrap_seed)
        results[name] = score_and_write(name, rows, c.output_dir, options, num_bad_rows_skipped=n_bad)
    paths = report.write_report(results, c.output_dir, title=c.title or "World-model scores")
    print(Path(paths["markdown"]).read_text())
    print("wrote " + ", ".join(str(v) for v in paths.values()))
    return 0
