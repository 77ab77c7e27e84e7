"""Command line of the scorer, shared by ``sdar/``, ``wedlm/`` and ``llm_training/evaluate.py``.

Only argparse is imported at module level, so ``--help`` is instant and never touches torch. Scoring needs no
decoder: a command that generates its predictions first (``llm_training/evaluate.py --api-url``) passes a
:class:`PredictionSource`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Protocol

DESCRIPTION = """Score world-model predictions: exact/semantic match, ROUGE-L, BLEU-1, Self-BLEU,
Distinct-1/2 and MAUVE. Reads <input-dir>/<file-pattern> for each dataset (rows with
prediction_raw|predicted|generated and reference|expected|ground_truth), writes
<output-dir>/<name>_scored.jsonl, eval_summary.json, eval_summary.md and eval_summary.png.
Accepts every flag of the paper's sdar/, wedlm/ and llm_training/evaluate.py."""



class PredictionSource(Protocol):
    """What writes the prediction files before they are scored, and the flags it adds (``--api-url`` among them)."""

    description: str          # appended to the scorer's --help
    flags: tuple[str, ...]    # its flags' dests that only matter with --api-url

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def __call__(self, args: argparse.Namespace) -> None: ...


def build_parser(*, predictions: PredictionSource | None = None, prog: str | None = None) -> argparse.ArgumentParser:
    from textwm.data.markers import SKIPPED_OVERLONG
    from textwm.metrics.bootstrap import MAUVE_RESAMPLES
    from textwm.metrics.diversity import SELF_BLEU_MAX_SAMPLES
    from textwm.metrics.mauve import DEFAULT_FEATURIZER, MAUVE_MAX_SAMPLES
    from textwm.metrics.overlap import ROUGE_IMPLS

    with_api = predictions is not None
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION + ("\n\n" + predictions.description if with_api else ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input-dir", help="folder with the prediction files" +
                   (" (default: --output-dir when --api-url is given)" if with_api else ""))
    p.add_argument("--datasets", nargs="+", metavar="NAME", help="dataset names to score")
    p.add_argument("--output-dir", required=True, help="where scored rows and the summary go")
    p.add_argument("--file-pattern", default="{name}_outputs.jsonl",
                   help="prediction file name inside --input-dir (default: %(default)s)")
    p.add_argument("--keep-errors", action="store_true", help="keep rows whose prediction starts with 'ERROR'")
    p.add_argument("--keep-overlong", action="store_true",
                   help=f"keep rows whose prompt was too long to generate (prediction {SKIPPED_OVERLONG} or "
                        "skipped_overlong: true; default: drop and count them)")
    p.add_argument("--keep-empty-ref", action="store_true", help="keep rows whose normalised reference is empty")
    p.add_argument("--no-dedupe", action="store_true", help="do not de-duplicate rows by 'index' (default: first wins)")
    p.add_argument("--extract-output-field", nargs="*", default=[], metavar="NAME",
                   help="datasets whose references are reduced to {output, exception} (api_bank style)")
    p.add_argument("--rouge-impl", choices=ROUGE_IMPLS, default="rouge_score",
                   help="ROUGE-L of Google rouge-score (default) or of pltrdy's rouge package, computed as the "
                        "paper's evaluate.py does (per row, failures scored 0.0 and counted; slow on long rows)")
    p.add_argument("--no-mauve", action="store_true", help="skip MAUVE (mauve: null in the summary)")
    p.add_argument("--mauve-featurizer", default=DEFAULT_FEATURIZER,
                   help="offline default %(default)s; or a sentence-transformers folder, or any HF model id/folder")
    p.add_argument("--mauve-max-samples", type=int, default=MAUVE_MAX_SAMPLES,
                   help="rows per MAUVE estimate, fixed-seed sample above it; 0 = all (default: %(default)s)")
    p.add_argument("--self-bleu-max-samples", type=int, default=SELF_BLEU_MAX_SAMPLES,
                   help="predictions per Self-BLEU estimate, 0 = all (default: %(default)s)")
    p.add_argument("--bootstrap", type=int, default=0, metavar="N",
                   help="add a 95%% percentile bootstrap interval to every metric (<metric>_ci95 in the summary) from "
                        "N resamples of the kept rows; 1000 is usual, 0 = off (default: %(default)s)")
    p.add_argument("--mauve-resamples", type=int, default=MAUVE_RESAMPLES, metavar="M",
                   help="of those, resamples that also recompute MAUVE, seconds each (default: %(default)s)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the resamples (default: %(default)s)")
    p.add_argument("--on-bad-row", choices=("fail", "skip"), default="fail",
                   help="malformed prediction row: stop (default) or skip and count it")
    p.add_argument("--compare", nargs="+", metavar="[LABEL=]DIR",
                   help="instead of scoring: put several scored output folders side by side "
                        "(comparison.md/.png/.json in --output-dir)")
    p.add_argument("--title", default=None, help="title of the table and chart")
    if predictions is not None:
        predictions.add_arguments(p)
    return p


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace, predictions: PredictionSource | None) -> None:
    with_api = predictions is not None
    if args.compare:
        if args.input_dir or args.datasets or (with_api and args.api_url):
            p.error("--compare reads already scored folders; use it without --input-dir/--datasets/--api-url")
        return
    if not args.datasets:
        p.error("--datasets is required (or use --compare)")
    if with_api and args.api_url:
        args.input_dir = args.input_dir or args.output_dir
    if not args.input_dir:
        p.error("--input-dir is required" + (" (or give --api-url to generate the predictions first)"
                                             if with_api else ""))
    if with_api and not args.api_url:
        _warn_generation_flags_unused(p, args, predictions.flags)
    unknown = set(args.extract_output_field) - set(args.datasets)
    if unknown:
        # The paper's READMEs say "add --extract-output-field api_bank" under a command scoring only `test`;
        # its scorer ignores the name then, so we accept it too, but say so.
        print(f"warning: --extract-output-field names datasets not in --datasets: {', '.join(sorted(unknown))} "
              "(ignored)", file=sys.stderr)
    for flag in ("mauve_max_samples", "self_bleu_max_samples", "bootstrap", "mauve_resamples"):
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must be >= 0")


def _warn_generation_flags_unused(p: argparse.ArgumentParser, args: argparse.Namespace,
                                  flags: tuple[str, ...]) -> None:
    """One stderr line when generation flags were set without --api-url (they only shape the requests)."""
    ignored = [f"--{name.replace('_', '-')}" for name in flags if getattr(args, name) != p.get_default(name)]
    if ignored:
        print(f"notice: {', '.join(ignored)} only apply with --api-url (generation); ignored, scoring "
              f"{args.input_dir} as it is", file=sys.stderr)


def main(argv: list[str] | None = None, *, predictions: PredictionSource | None = None,
         prog: str | None = None) -> int:
    """Score predictions; with ``predictions`` (e.g. :class:`textwm.generation.api.ApiPredictions`) its flags
    are added and, when given, it writes the prediction files first."""
    p = build_parser(predictions=predictions, prog=prog)
    args = p.parse_args(argv)
    _check_args(p, args, predictions)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from textwm._optional import MissingDependencyError, require
    from textwm.config import ConfigError, check_output_dir, exit_on_sigterm
    from textwm.data.jsonl import DataError
    from textwm.metrics import report

    exit_on_sigterm()
    try:
        check_output_dir(args.output_dir, "--output-dir")
        if args.compare:
            paths = report.compare_runs(args.compare, args.output_dir, title=args.title or "World-model comparison")
            print(Path(paths["markdown"]).read_text())
            print("wrote " + ", ".join(str(v) for v in paths.values()))
            return 0
        if args.rouge_impl == "pltrdy":
            require("rouge", extra="metrics", package="rouge")  # fail before hours of generation or scoring
        if predictions is not None and args.api_url:
            predictions(args)
        return _score(args)
    except (DataError, ConfigError, MissingDependencyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _score(args: argparse.Namespace) -> int:
    from textwm.data.jsonl import DataError
    from textwm.metrics import report
    from textwm.metrics.scorer import ScoreOptions, read_predictions, score_and_write

    files = {name: Path(args.input_dir) / args.file_pattern.format(name=name) for name in args.datasets}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise DataError(f"prediction file(s) not found: {', '.join(missing)}", path=args.input_dir)
    # Read (and validate) every file before writing anything: a bad row in the last dataset
    # must not leave the first ones scored without a summary.
    loaded = {name: read_predictions(path, on_error=args.on_bad_row) for name, path in files.items()}
    # The summary indexes the scored files of one run: an earlier run's goes first, so an interrupted run leaves new
    # scored files without a summary, never beside an old one.
    for suffix in (".json", ".md", ".png"):
        (Path(args.output_dir) / f"eval_summary{suffix}").unlink(missing_ok=True)
    results = {}
    for name, (rows, n_bad) in loaded.items():
        options = ScoreOptions(drop_errors=not args.keep_errors, drop_overlong=not args.keep_overlong,
                               drop_empty_ref=not args.keep_empty_ref, dedupe_by_index=not args.no_dedupe,
                               rouge_impl=args.rouge_impl,
                               extract_output_field=name in args.extract_output_field,
                               compute_mauve=not args.no_mauve, mauve_featurizer=args.mauve_featurizer,
                               mauve_max_samples=args.mauve_max_samples,
                               self_bleu_max_samples=args.self_bleu_max_samples, on_bad_row=args.on_bad_row,
                               bootstrap=args.bootstrap, mauve_resamples=args.mauve_resamples,
                               bootstrap_seed=args.bootstrap_seed)
        results[name] = score_and_write(name, rows, args.output_dir, options, num_bad_rows_skipped=n_bad)
    paths = report.write_report(results, args.output_dir, title=args.title or "World-model scores")
    print(Path(paths["markdown"]).read_text())
    print("wrote " + ", ".join(str(v) for v in paths.values()))
    return 0
