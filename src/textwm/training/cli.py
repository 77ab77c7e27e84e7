"""Command line of the SFT trainer (``sdar/train.py``, ``wedlm/train.py``, launched by ``sdar/train_sft.sh``).

    python sdar/train.py --config sdar/configs/sft_example.yaml max_steps=10 --learning-rate 1e-4

``--config`` also takes the paper's WeDLM YAML (Tencent/WeDLM finetune keys; :mod:`textwm.training.paper_keys`).
"""

from __future__ import annotations

import logging
import sys

from textwm.config import ConfigCLI, ConfigError, leaves
from textwm.data.jsonl import DataError
from textwm.models.checkpoint import CheckpointError
from textwm.training.config import IGNORED_LLAMAFACTORY_KEYS, SFTConfig
from textwm.training.paper_keys import expand_paper_argv


def list_keys() -> None:
    for leaf in leaves(SFTConfig):
        print(f"{leaf.key:30s} {leaf.default!r:24s} {leaf.help}")


def main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-keys" in argv:
        list_keys()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cli = ConfigCLI(SFTConfig, prog=prog, description=description, ignored_keys=IGNORED_LLAMAFACTORY_KEYS)
    cli.add_argument("--list-keys", action="store_true", help="print every config key with its default and help")
    try:  # a --config in the paper's WeDLM format (Tencent/WeDLM finetune keys) becomes our key=value overrides
        argv, paper = expand_paper_argv(argv)
        parsed = cli.parse(argv)
        config = paper.finish(parsed[0]) if paper is not None else parsed[0]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    # heavy: the trainer loads torch and transformers; --help and the checks need neither
    from textwm.training.trainer import train

    try:
        train(config)
    except (DataError, CheckpointError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
