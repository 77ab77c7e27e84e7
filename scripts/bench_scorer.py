"""Benchmark the scorer: time to score N prediction rows (every metric, MAUVE included).

Rows are made from the bundled ScienceWorld sample: each reference is a real observation and
each prediction a perturbed copy (words dropped/swapped, a row-specific token), so all N rows
are distinct and as long as real observations. Prints one line per phase and the total.

    python scripts/bench_scorer.py --rows 10000
"""

import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_jsonl
from textwm.metrics.scorer import ScoreOptions, score_file

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "sciworld_wm_train.jsonl"


def synthesize(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    observations = [r["messages"][-1]["content"] for r in read_jsonl(SAMPLE).rows]
    rows = []
    for i in range(n):
        ref = observations[i % len(observations)] + f" (step {i})"
        words = ref.split()
        pred_words = [w for w in words if rng.random() > 0.15]
        if len(pred_words) > 3 and rng.random() < 0.5:
            a, b = rng.sample(range(len(pred_words)), 2)
            pred_words[a], pred_words[b] = pred_words[b], pred_words[a]
        pred = ref if rng.random() < 0.3 else " ".join(pred_words)
        rows.append({"index": i, "prediction_raw": pred, "reference": ref})
    return rows


@dataclass
class BenchScorerConfig:
    rows: int = option(10000, "synthetic prediction rows scored")
    seed: int = option(0, "seed of the rows")
    mauve_max_samples: int | None = option(None, "rows per MAUVE estimate (default: the scorer's)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(BenchScorerConfig, prog="scripts/bench_scorer.py", description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_outputs.jsonl"
        write_jsonl(path, synthesize(args.rows, args.seed))
        options = ScoreOptions() if args.mauve_max_samples is None else ScoreOptions(
            mauve_max_samples=args.mauve_max_samples)
        started = time.perf_counter()
        summary = score_file("bench", path, tmp, options)
        total = time.perf_counter() - started
    for key, value in summary.items():
        print(f"{key:24s} {value}")
    print(f"scored {args.rows} rows in {total:.1f} s (MAUVE over {summary['mauve_num_samples']} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
