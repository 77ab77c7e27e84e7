"""Command line of batched world-model generation (``sdar/eval_generate.py``)."""

from __future__ import annotations

import argparse
import logging
import sys


def build_parser(prog: str | None = None, description: str = "") -> argparse.ArgumentParser:
    from textwm.generation import STRATEGIES

    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True,
                   help="checkpoint folder: SDAR (block diffusion), WeDLM (streaming decoding) or any causal LM")
    p.add_argument("--data-dir", required=True, help="folder of the evaluation files")
    p.add_argument("--datasets", nargs="+", required=True, metavar="NAME", help="dataset names")
    p.add_argument("--file-pattern", default="eval_{name}.jsonl", help="file name in --data-dir (default: %(default)s)")
    p.add_argument("--output-dir", required=True, help="writes <name>_outputs.jsonl here")
    p.add_argument("--num-gpus", type=int, default=1, help="worker processes, one GPU each; 0 = in-process on the CPU")
    p.add_argument("--per-batch", type=int, default=8, help="prompts per forward batch per GPU (default: %(default)s)")
    p.add_argument("--prompt-truncate", type=int, default=8000,
                   help="keep at most the last N prompt tokens (default: %(default)s)")
    p.add_argument("--gen-length", type=int, default=1024, help="max new tokens (default: %(default)s)")
    p.add_argument("--block-length", type=int, default=4, help="SDAR block length; divides the model's (default: %(default)s)")
    p.add_argument("--denoising-steps", type=int, default=4, help="SDAR steps per block (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--confidence-threshold", type=float, default=0.85,
                   help="low_confidence_dynamic threshold (default: %(default)s)")
    p.add_argument("--remasking-strategy", choices=STRATEGIES, default="low_confidence_dynamic")
    p.add_argument("--entropy-budget", type=float, default=0.5, help="entropy_bounded budget in nats (default: %(default)s)")
    p.add_argument("--window-size", type=int, default=16, help="WeDLM decoding window (default: %(default)s)")
    p.add_argument("--entropy-threshold", type=float, default=0.4,
                   help="WeDLM: fill masks with entropy + penalty * distance below this (default: %(default)s)")
    p.add_argument("--position-penalty", type=float, default=0.02,
                   help="WeDLM: entropy penalty per slot after the first mask (default: %(default)s)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: unseeded)")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32")
    p.add_argument("--mask-token-id", type=int, default=None,
                   help="for SDAR/WeDLM checkpoints whose config.json lacks mask_token_id")
    return p


def main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "") -> int:
    args = build_parser(prog, description).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from textwm.data.jsonl import DataError
    from textwm.generation.runner import EvalGenerateConfig, run
    from textwm.models.checkpoint import CheckpointError

    config = EvalGenerateConfig(**{k: v for k, v in vars(args).items()})
    try:
        stats = run(config)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, s in stats.items():
        print(f"{name}: {s['rows']} rows -> {s['output']} ({s['errors']} ERROR rows)")
    return 0
