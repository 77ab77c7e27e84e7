"""Command line of batched world-model generation (``sdar/eval_generate.py``, ``wedlm/eval_generate.py``)."""

from __future__ import annotations

import logging
import sys


def main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "",
         config_cls: type | None = None) -> int:
    """``config_cls``: an :class:`EvalGenerateConfig` subclass with other defaults (``wedlm/eval_generate.py``'s
    upstream WeDLM temperature); default the class itself."""
    from textwm.config import ConfigCLI
    from textwm.generation.runner import EvalGenerateConfig

    parsed = ConfigCLI(config_cls or EvalGenerateConfig, prog=prog, description=description).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from textwm.data.jsonl import DataError
    from textwm.generation.runner import run
    from textwm.models.checkpoint import CheckpointError

    try:
        stats = run(config)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, s in stats.items():
        print(f"{name}: {s['rows']} rows -> {s['output']} ({s['errors']} ERROR rows)")
    return 0
