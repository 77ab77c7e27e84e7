"""Side-by-side training-loss curves of two runs of the trainer, from their logs (the
optimised path must follow the plain one over the same seed and data).

Reads the trainer's step lines (``step 10/200 | loss 9.8942 | ...``) from each log, prints the two
losses per logged step with their difference, and exits 1 when a step is missing from one run or the
largest relative difference exceeds ``--tolerance``.

    python scripts/compare_loss_curves.py runs/plain/train.log runs/fast/train.log --tolerance 0.02
"""

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option

STEP_LINE = re.compile(r"step (\d+)/\d+ \| loss (-?(?:nan|inf)|[0-9.eE+-]+)")


def read_curve(path: Path) -> dict[int, float]:
    """``{step: loss}`` from a trainer log; an error naming the file when it has no step lines."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such log")
    curve = {int(m[1]): float(m[2]) for m in STEP_LINE.finditer(path.read_text(errors="replace"))}
    if not curve:
        raise SystemExit(f"{path}: no 'step N/M | loss X' lines (is it the trainer's log?)")
    return curve


@dataclass
class CurvesConfig:
    reference: str = option(help="log of the plain run", positional=True)
    candidate: str = option(help="log of the optimised run", positional=True)
    tolerance: float = option(0.02, "largest allowed |a - b| / |a| at a logged step")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(CurvesConfig, prog="scripts/compare_loss_curves.py", description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    ref, cand = read_curve(Path(args.reference)), read_curve(Path(args.candidate))
    missing = sorted(set(ref) ^ set(cand))
    print(f"{'step':>6} {'reference':>10} {'candidate':>10} {'rel diff':>9}")
    worst = 0.0
    for step in sorted(set(ref) & set(cand)):
        rel = abs(ref[step] - cand[step]) / max(abs(ref[step]), 1e-12)
        worst = max(worst, rel if math.isfinite(rel) else math.inf)     # a run that went nan / inf fails
        print(f"{step:6d} {ref[step]:10.4f} {cand[step]:10.4f} {rel:9.2%}")
    print(f"steps compared: {len(set(ref) & set(cand))}; largest relative difference {worst:.2%} "
          f"(tolerance {args.tolerance:.2%})")
    if missing:
        print(f"steps logged by one run only: {missing[:10]}", file=sys.stderr)
        return 1
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
