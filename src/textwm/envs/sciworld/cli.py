"""Command lines of the ScienceWorld entry points in ``sciworld/``."""

from __future__ import annotations

import argparse
import logging
import sys


def build_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="sciworld/build_wm_dataset.py",
        description="Build the ScienceWorld world-model dataset (and RL task rows, SFT demos) from the real env.")
    p.add_argument("--out-dir", required=True, help="writes wm_{train,dev,test}.jsonl, rl_*.jsonl, sft_*.jsonl, cards")
    p.add_argument("--tasks", nargs="*", default=None, help="task names (default: all 30)")
    p.add_argument("--train-variations", type=int, default=8, help="variations per task from the train list")
    p.add_argument("--dev-variations", type=int, default=1)
    p.add_argument("--test-variations", type=int, default=1)
    p.add_argument("--explore-episodes", type=int, default=1, help="exploratory episodes per variation")
    p.add_argument("--explore-steps", type=int, default=25, help="exploratory actions per episode")
    p.add_argument("--workers", type=int, default=2, help="worker processes (one JVM each)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-turns", type=int, default=50, help="max_turns of the RL task rows")
    p.add_argument("--prompt-style", choices=("full", "compact"), default="full",
                   help="WM prompt layout: full (the paper's sections) or compact (small CPU models)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    from textwm.envs.sciworld.build import BuildConfig, build

    config = BuildConfig(out_dir=args.out_dir, tasks=tuple(args.tasks) if args.tasks else None,
                         variations={"train": args.train_variations, "dev": args.dev_variations,
                                     "test": args.test_variations},
                         explore_episodes=args.explore_episodes, explore_steps=args.explore_steps,
                         workers=args.workers, seed=args.seed, max_turns=args.max_turns,
                         prompt_style=args.prompt_style)
    try:
        report = build(config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{sum(report.transitions.values())} transitions {report.transitions} over {report.tasks} task types "
          f"in {report.seconds:.0f} s -> {report.out_dir} (card: dataset_card.md)")
    if report.gold_below_100:
        print(f"gold runs below 100: {', '.join(report.gold_below_100)}")
    return 0
