"""Command lines of the data-preparation entry points (``sdar/``, ``wedlm/``, ``llm_training/``).

Only argparse is imported at module level: ``--help`` never imports torch or ``datasets``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="a malformed row: stop with its file and line (default; nothing is written), "
                        "or skip it and report the count")
    p.add_argument("--allow-no-target", action="store_true",
                   help="accept rows whose last message is not from the assistant (not SFT data)")


def convert_main(argv: list[str] | None = None, *, default_format: str, prog: str | None = None,
                 description: str = "") -> int:
    """``prepare_data.py --input IN --output OUT``: chat JSONL -> a trainer's format."""
    from textwm.data.converters import FORMATS

    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="chat JSONL: {'messages': [...]} rows (list or JSON string) "
                                                   "or bare message arrays")
    p.add_argument("--output", required=True, help="destination JSONL (written atomically)")
    p.add_argument("--format", choices=FORMATS, default=default_format,
                   help="llamafactory: {'messages': [...]} + dataset_info.json entry beside the output; "
                        "array: bare message arrays; swift: messages plus extra fields (default: %(default)s)")
    p.add_argument("--dataset-name", help="name registered in dataset_info.json (default: output file stem)")
    p.add_argument("--passthrough", action="store_true",
                   help="input rows are already bare message arrays: validate and copy them")
    _add_common(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    from textwm.config import ConfigError, check_output_file, exit_on_sigterm
    from textwm.data.converters import convert_file
    from textwm.data.jsonl import DataError

    exit_on_sigterm()
    try:
        check_output_file(args.output, "--output")
        report = convert_file(args.input, args.output, fmt=args.format, passthrough=args.passthrough,
                              on_error=args.on_error, require_target=not args.allow_no_target,
                              dataset_name=args.dataset_name)
    except (DataError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


def hub_main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "") -> int:
    """``prepare_data.py --source SRC --out-dir DIR``: HF dataset / local data -> train/test JSONL."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", "--repo", dest="source", required=True,
                   help="Hugging Face dataset id (org/name), a local .jsonl/.json/.parquet file, or a local folder")
    p.add_argument("--train-configs", nargs="+", default=[None], metavar="CONFIG",
                   help="dataset config(s) for the train split (hub/folder sources)")
    p.add_argument("--test-configs", nargs="*", default=[], metavar="CONFIG",
                   help="dataset config(s) for the test split")
    p.add_argument("--train-split", default="train")
    p.add_argument("--test-split", default=None,
                   help="split to write as test.jsonl (default: 'test' when --test-configs is given)")
    p.add_argument("--test-size", type=float, default=0.0,
                   help="if the source has no test split: hold out this fraction of train rows (e.g. 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --test-size hold-out")
    p.add_argument("--out-dir", default="./data", help="writes train.jsonl (and test.jsonl) here")
    p.add_argument("--no-token", action="store_true", help="do not send $HF_TOKEN (public datasets)")
    _add_common(p)
    args = p.parse_args(argv)
    if args.test_size and (args.test_configs or args.test_split):
        p.error("--test-size holds out train rows; it cannot be combined with --test-split/--test-configs")
    if not 0.0 <= args.test_size < 1.0:
        p.error("--test-size must be in [0, 1)")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    from textwm.data.converters import to_swift
    from textwm.data.jsonl import DataError, write_jsonl
    from textwm.data.sources import HubUnreachableError, holdout_split, load_split

    token = False if args.no_token else None  # False: never send a token

    def load(split: str, configs: list) -> list:
        rows = []
        for config in configs:
            loaded = load_split(args.source, split=split, config=config, token=token,
                                on_error=args.on_error, require_target=not args.allow_no_target)
            print(f"{args.source} [{config or 'default'}/{split}]: {len(loaded.rows)} rows"
                  + (f", {loaded.skipped} skipped" if loaded.skipped else ""))
            rows.extend(loaded.rows)
        return rows

    try:
        train = load(args.train_split, args.train_configs)
        test: list = []
        if args.test_configs or args.test_split:
            test = load(args.test_split or "test", args.test_configs or [None])
        elif args.test_size:
            train, test = holdout_split(train, args.test_size, args.seed)
    except (DataError, HubUnreachableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out_dir)
    n = write_jsonl(out / "train.jsonl", (to_swift(r) for r in train))
    print(f"train.jsonl: {n} rows -> {out / 'train.jsonl'}")
    if test:
        n = write_jsonl(out / "test.jsonl", (to_swift(r) for r in test))
        print(f"test.jsonl: {n} rows -> {out / 'test.jsonl'}")
    return 0
