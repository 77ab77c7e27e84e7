"""Command line of the comparison: AR vs SDAR vs WeDLM world models at equal size, rows and steps
(:mod:`textwm.experiments.wm_comparison`; ``scripts/wm_comparison.py``, ``textwm compare``).

    python scripts/wm_comparison.py --smoke --out runs/wm_comparison_smoke           # CPU, a few minutes
    python scripts/wm_comparison.py --data-dir runs/sciworld_data --out runs/wm_comparison   # one GPU
    python scripts/wm_comparison.py --data-dir runs/sciworld_data --out runs/wm_comparison --until agents  # GPU part
    python scripts/wm_comparison.py --data-dir runs/sciworld_data --out runs/wm_comparison --parallel 3  # 3 arms at once
    python scripts/wm_comparison.py --init smollm2-135m-instruct --data-dir runs/sciworld_data --out runs/wmc_smollm2
        # the pretrained regime: AR fine-tuned, SDAR / WeDLM converted and fine-tuned, epochs until held-out loss stops
    python scripts/wm_comparison.py --init smollm2-135m-instruct --stage2 --no-stage1 --grpo-families real \
        --data-dir runs/sciworld_lifespan --out runs/stage2_real        # Stage 2's real-env arm alone
"""

from __future__ import annotations

import logging
import sys

from textwm.config import ConfigCLI, ConfigError
from textwm.data.jsonl import DataError
from textwm.experiments.stages import StateError
from textwm.experiments.wm_comparison import UNTIL, Comparison, ComparisonConfig, ComparisonError


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    cli = ConfigCLI(ComparisonConfig, prog=prog, description=__doc__.split("\n\n")[0],
                    epilog="Defaults: one H200; with --smoke a CPU setting of a few minutes; with --init the "
                           "pretrained regime's (textwm.experiments.comparison_config.ComparisonConfig.create). "
                           "Values come from those, then --config FILE.yaml, then the flags.", key_values=False)
    cli.add_argument("--fresh", action="store_true", help="delete the run folder and start over")
    cli.add_argument("--until", choices=UNTIL, default="report",
                     help="train: stop once every arm is trained; generate: once every arm has decoded; agents: once "
                          "Stage 2 is done too (all the GPU work); score and report later, anywhere, without --until; "
                          "scores: score and report, no Stage-2 step (on a machine without the world models)")
    try:
        given, extra = cli.parse_given(argv)
        smoke = given.pop("smoke", False)
        config = ComparisonConfig.create(smoke=smoke, **given)
        comparison = Comparison(config, fresh=extra.fresh)
    except (ConfigError, ValueError, ComparisonError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        comparison.run(until=extra.until)
    except (ComparisonError, ConfigError, DataError, StateError) as exc:   # ours, with what and where; else a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
