"""Command line of the SFT trainer (``sdar/train.py``, launched by ``sdar/train_sft.sh``)."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "") -> int:
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML config (keys: see `--list-keys`)")
    p.add_argument("--list-keys", action="store_true", help="print every config key with its default and help")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="override config keys, e.g. max_steps=10")
    args = p.parse_args(argv)

    from textwm.training.config import ConfigError, SFTConfig, load_config

    if args.list_keys:
        import dataclasses

        for f in dataclasses.fields(SFTConfig):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            print(f"{f.name:30s} {default!r:24s} {f.metadata.get('help', '')}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from textwm.data.jsonl import DataError
    from textwm.models.checkpoint import CheckpointError
    from textwm.training.trainer import train

    try:
        train(config)
    except (DataError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
