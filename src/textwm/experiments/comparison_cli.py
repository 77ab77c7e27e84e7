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

import argparse
import dataclasses
import logging
import sys

from textwm.config import ConfigError
from textwm.data.jsonl import DataError
from textwm.experiments.wm_comparison import (
    FAMILIES,
    REGIMES,
    UNTIL,
    Comparison,
    ComparisonConfig,
    ComparisonError,
)


def main(argv: list[str] | None = None) -> int:
    defaults = ComparisonConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=defaults.out, help="run folder (default: %(default)s); a re-run resumes it")
    p.add_argument("--smoke", action="store_true", help="tiny models, the env's smallest demo data (CPU, CI)")
    p.add_argument("--fresh", action="store_true", help="delete the run folder and start over")
    p.add_argument("--until", choices=UNTIL, default="report",
                   help="train: stop once every arm is trained; generate: once every arm has decoded; agents: once "
                        "Stage 2 is done too (all the GPU work); score and report later, anywhere, without --until; "
                        "scores: score and report, no Stage-2 step (on a machine without the world models)")
    p.add_argument("--data-dir", help="folder with wm_train.jsonl and wm_test.jsonl (default: the env's demo dataset)")
    p.add_argument("--env", help=f"env of the demo dataset (default: {defaults.env})")
    p.add_argument("--families", nargs="+", choices=FAMILIES, help="default: all three")
    p.add_argument("--regimes", nargs="+", choices=REGIMES, help="default: scratch convert; --init: pretrained")
    p.add_argument("--init", help="the pretrained regime's start: a pretrained start's name (python -m "
                                  "textwm.models.pretrained --list) or an AR checkpoint folder")
    p.add_argument("--sdar-denoising-steps", nargs="+", type=int,
                   help=f"pretrained regime: SDAR's greedy passes (default: {' '.join(map(str, defaults.sdar_denoising_steps))})")
    p.add_argument("--temperatures", nargs="+", type=float,
                   help=f"pretrained regime: the best epoch's sampling (default: {' '.join(map(str, defaults.temperatures))})")
    p.add_argument("--grpo-families", nargs="+", choices=(*FAMILIES, "real"),
                   help="Stage 2's world models, and real: GRPO in the real env, the upper reference (default: ar sdar)")
    p.add_argument("--agent-tasks", nargs="*", metavar="TYPE",
                   help="Stage 2's task types (its agent's demos, GRPO tasks and real-env rows); none: every type "
                        "(default: the env's small-agent types, ScienceWorld: lifespan-longest-lived "
                        "lifespan-shortest-lived; --smoke: every type)")
    p.add_argument("--no-stage2", dest="stage2", action="store_false", default=None,
                   help="stop after the world models' report (no agent SFT, GRPO or real-env runs)")
    p.add_argument("--stage2", dest="stage2", action="store_true", default=None,
                   help="with --init: Stage 2 too (off by default there): the agent from --agent-init SFT'd on the "
                        "gold demos, GRPO in the real env and inside the best epoch of each --grpo-families world model")
    p.add_argument("--no-stage1", dest="stage1", action="store_false", default=None,
                   help="Stage 2 alone, no world model trained: with --stage2 --grpo-families real (GRPO in the real "
                        "env, the reference arm, on a machine of its own)")
    p.add_argument("--grpo-dynamic-sample", action=argparse.BooleanOptionalAction, default=None,
                   help=f"regenerate groups whose rollouts got one reward (default: {defaults.grpo_dynamic_sample}; "
                        "with --init: on)")
    p.add_argument("--grpo-seeds", nargs="+", type=int, help="one GRPO run per seed in each arm (default: 0; "
                                                             "with --init: 0 1)")
    p.add_argument("--agent-init", help="Stage 2's agent start: a pretrained start's name or an AR checkpoint "
                                        "(default with --init: the same start; else a tiny random agent)")
    for name, kind in (("size", str), ("vocab_size", int), ("steps", int), ("head_start", float),
                       ("batch_size", int), ("learning_rate", float), ("cutoff_len", int), ("save_steps", int),
                       ("eval_rows", int), ("gen_length", int), ("samples", int), ("temperature", float),
                       ("denoising_steps", int), ("per_batch", int), ("seed", int), ("parallel", int),
                       ("max_epochs", int), ("patience", int), ("bootstrap", int),
                       ("agent_size", str), ("agent_vocab_size", int), ("agent_cutoff_len", int),
                       ("agent_sft_steps", int), ("agent_sft_checkpoints", int), ("agent_target_success", float),
                       ("agent_learning_rate", float), ("grpo_steps", int), ("grpo_turns", int),
                       ("grpo_learning_rate", float), ("grpo_generations", int), ("grpo_tasks_per_step", int),
                       ("grpo_completion_length", int), ("calibration_episodes", int), ("calibration_every", int),
                       ("agent_episodes", int), ("agent_turns", int),
                       ("workers", int), ("wm_port", int), ("proxy_port", int)):
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, help=f"default: {getattr(defaults, name)}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(ComparisonConfig)
                 if f.name != "smoke" and getattr(args, f.name, None) is not None}
    for name in ("families", "regimes", "grpo_families", "grpo_seeds", "agent_tasks", "sdar_denoising_steps",
                 "temperatures"):
        if name in overrides:
            overrides[name] = tuple(overrides[name])
    try:
        config = ComparisonConfig.create(smoke=args.smoke, **overrides)
        comparison = Comparison(config, fresh=args.fresh)
    except (ValueError, ComparisonError) as exc:
        p.error(str(exc))
    try:
        comparison.run(until=args.until)
    except (ComparisonError, ConfigError, DataError) as exc:   # ours, with what and where; anything else: traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0

