"""Command lines of the data-preparation entry points (``sdar/``, ``wedlm/``, ``llm_training/``, ``textwm data``).

Configs as everywhere (:mod:`textwm.config`): flags, ``--config FILE.yaml``, ``key=value``. ``datasets`` is imported
only when a source is read (:mod:`textwm.data.sources`), so ``--help`` never imports it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from textwm.cli_checks import check_output_file
from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.converters import FORMATS, convert_file, to_swift
from textwm.data.jsonl import DataError, write_jsonl
from textwm.data.sources import HubUnreachableError, holdout_split, load_split


@dataclass
class RowChecks:
    """What a malformed row does."""

    on_error: str = option("fail", "a malformed row: stop with its file and line (nothing is written), or skip it "
                                   "and report the count", choices=("fail", "skip"))
    allow_no_target: bool = option(False, "accept rows whose last message is not from the assistant (not SFT data)")


@dataclass
class ConvertConfig:
    """Chat JSONL -> a trainer's format."""

    input: str = option(help="chat JSONL: {'messages': [...]} rows (list or JSON string) or bare message arrays")
    output: str = option(help="destination JSONL (written atomically)")
    format: str = option("llamafactory", "llamafactory: {'messages': [...]} + dataset_info.json entry beside the "
                                         "output; array: bare message arrays; swift: messages plus extra fields",
                         choices=FORMATS)
    dataset_name: str | None = option(None, "name registered in dataset_info.json (default: the output file stem)")
    passthrough: bool = option(False, "input rows are already bare message arrays: validate and copy them")
    checks: RowChecks = option(help="malformed rows", default_factory=RowChecks)


@dataclass
class ArrayConvertConfig(ConvertConfig):
    """Chat JSONL -> WeDLM's bare message arrays (or another trainer's format)."""

    format: str = option("array", "llamafactory: {'messages': [...]} + dataset_info.json entry beside the output; "
                                  "array: bare message arrays; swift: messages plus extra fields", choices=FORMATS)


@dataclass
class HubDataConfig:
    """A Hugging Face dataset, a local file or a local folder -> train/test JSONL for ms-swift."""

    source: str = option(help="Hugging Face dataset id (org/name), a local .jsonl/.json/.parquet file, or a local "
                              "folder", aliases=("--repo",))
    train_configs: list[str | None] = option(help="dataset config(s) for the train split (hub/folder sources)",
                                             default_factory=lambda: [None], metavar="CONFIG")
    test_configs: list[str] = option(help="dataset config(s) for the test split", default_factory=list,
                                     metavar="CONFIG")
    train_split: str = option("train", "the split written as train.jsonl")
    test_split: str | None = option(None, "split to write as test.jsonl (default: 'test' when --test-configs is "
                                          "given)")
    test_size: float = option(0.0, "if the source has no test split: hold out this fraction of train rows (e.g. "
                                   "0.05)")
    seed: int = option(0, "seed of the --test-size hold-out")
    out_dir: str = option("./data", "writes train.jsonl (and test.jsonl) here")
    token: bool = option(True, "send $HF_TOKEN to the hub (--no-token: never, for public datasets)")
    checks: RowChecks = option(help="malformed rows", default_factory=RowChecks)

    def __post_init__(self) -> None:
        if self.test_size and (self.test_configs or self.test_split):
            raise ConfigError("--test-size holds out train rows; it cannot be combined with --test-split or "
                              "--test-configs")
        if not 0.0 <= self.test_size < 1.0:
            raise ConfigError(f"must be in [0, 1), got {self.test_size}", key="--test-size")


def convert_main(argv: list[str] | None = None, *, config_cls: type[ConvertConfig] = ConvertConfig,
                 prog: str | None = None, description: str = "") -> int:
    """``prepare_data.py --input IN --output OUT``: chat JSONL -> a trainer's format."""
    parsed = ConfigCLI(config_cls, prog=prog, description=description or config_cls.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    c = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    try:
        check_output_file(c.output, "--output")
        report = convert_file(c.input, c.output, fmt=c.format, passthrough=c.passthrough,
                              on_error=c.checks.on_error, require_target=not c.checks.allow_no_target,
                              dataset_name=c.dataset_name)
    except (DataError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


def hub_main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "") -> int:
    """``prepare_data.py --source SRC --out-dir DIR``: HF dataset / local data -> train/test JSONL."""
    parsed = ConfigCLI(HubDataConfig, prog=prog, description=description or HubDataConfig.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    c = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    token = None if c.token else False  # False: never send a token

    def load(split: str, configs: list) -> list:
        rows = []
        for config in configs:
            loaded = load_split(c.source, split=split, config=config, token=token, on_error=c.checks.on_error,
                                require_target=not c.checks.allow_no_target)
            print(f"{c.source} [{config or 'default'}/{split}]: {len(loaded.rows)} rows"
                  + (f", {loaded.skipped} skipped" if loaded.skipped else ""))
            rows.extend(loaded.rows)
        return rows

    try:
        train = load(c.train_split, c.train_configs or [None])
        test: list = []
        if c.test_configs or c.test_split:
            test = load(c.test_split or "test", c.test_configs or [None])
        elif c.test_size:
            train, test = holdout_split(train, c.test_size, c.seed)
    except (DataError, HubUnreachableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(c.out_dir)
    n = write_jsonl(out / "train.jsonl", (to_swift(r) for r in train))
    print(f"train.jsonl: {n} rows -> {out / 'train.jsonl'}")
    if test:
        n = write_jsonl(out / "test.jsonl", (to_swift(r) for r in test))
        print(f"test.jsonl: {n} rows -> {out / 'test.jsonl'}")
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``textwm data prepare``: chat JSONL -> a trainer's format (LlamaFactory rows by default)."""
    return convert_main(argv, prog=prog)


def hub(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``textwm data hub``: a dataset -> train/test JSONL for ms-swift."""
    return hub_main(argv, prog=prog)
