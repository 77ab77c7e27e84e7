"""Did an agent get better? Two runs of real-env episodes on the same tasks, compared pair by pair.

Each episode of run A is paired with the episode of run B that has the same ``episode_id`` (the same held-out
task row and repeat), so what the tasks have in common (easy and hard variations) cancels out. Reported:

- each run's success rate with its Wilson 95% interval;
- the difference (B - A) with a 95% percentile bootstrap interval over the pairs;
- the exact McNemar test: under "no change" an episode that succeeds in one run only is as likely to be A's
  as B's, so the count of B-only successes among the discordant pairs is Binomial(discordant, 1/2); the
  two-sided p-value is twice its smaller tail (at most 1).

    python -m textwm.eval.paired --before runs/eval_sft/episodes_real.jsonl --after runs/eval_grpo/episodes_real.jsonl

(a folder stands for its ``episodes_real.jsonl``). Episodes present in one run only are an error naming
them: a comparison over different tasks is not paired.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import DataError, read_jsonl, write_json
from textwm.envs.episode import FAILURE_REASONS
from textwm.eval.episodes import fmt_ci, wilson_interval

#: Bootstrap resamples of the pairs for the difference's interval.
RESAMPLES = 10_000


def mcnemar_exact(only_before: int, only_after: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs (1.0 when there are none)."""
    n = only_before + only_after
    if n == 0:
        return 1.0
    k = min(only_before, only_after)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_difference(before: Sequence[bool], after: Sequence[bool], *, resamples: int = RESAMPLES,
                         seed: int = 0) -> list[float]:
    """95% percentile interval of ``mean(after) - mean(before)`` over resampled pairs."""
    n = len(before)
    if n == 0:
        raise ValueError("no pairs to resample")
    rng = random.Random(seed)
    diffs = [int(after[i]) - int(before[i]) for i in range(n)]
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return [round(means[int(0.025 * (resamples - 1))], 4), round(means[math.ceil(0.975 * (resamples - 1))], 4)]


@dataclass(frozen=True)
class PairedSuccess:
    """Success of the same episodes before and after (counts, rates, intervals, the paired test)."""

    episodes: int
    successes_before: int
    successes_after: int
    both: int
    only_before: int
    only_after: int
    neither: int
    rate_before: float
    rate_after: float
    ci95_before: list[float]
    ci95_after: list[float]
    difference: float
    difference_ci95: list[float]
    p_value: float
    #: Pairs where either episode ended in a failure (agent, env or WM error): counted as unsuccessful, shown here.
    failed_pairs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self, before: str = "before", after: str = "after") -> str:
        return "\n".join([
            "| run | episodes | successes | success rate | 95% interval (Wilson) |", "|---|---|---|---|---|",
            f"| {before} | {self.episodes} | {self.successes_before} | {self.rate_before:.3f} | "
            f"{fmt_ci(self.ci95_before)} |",
            f"| {after} | {self.episodes} | {self.successes_after} | {self.rate_after:.3f} | {fmt_ci(self.ci95_after)} |",
            "",
            f"Difference ({after} - {before}): {self.difference:+.3f}, 95% bootstrap interval "
            f"{fmt_ci(self.difference_ci95)}; discordant pairs: {self.only_after} succeed only {after}, "
            f"{self.only_before} only {before}; exact McNemar p = {self.p_value:.4g}."
            + (f" {self.failed_pairs} pairs had an episode ended by a failure (counted as unsuccessful)."
               if self.failed_pairs else "")])


def compare(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], *, resamples: int = RESAMPLES,
            seed: int = 0) -> PairedSuccess:
    """Pair two runs' episode records (``episode_id``, ``success``) and compare them.

    Raises:
        ValueError: an episode id in one run only, twice in one run, or no episodes.
    """
    a, b = _by_id(before, "before"), _by_id(after, "after")
    failed = {str(r["episode_id"]) for r in (*before, *after) if r.get("reason") in FAILURE_REASONS}
    if a.keys() != b.keys():
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        raise ValueError(f"the runs did not play the same episodes: {len(only_a)} only before (e.g. {only_a[:3]}), "
                         f"{len(only_b)} only after (e.g. {only_b[:3]}); evaluate both on the same rows and repeats")
    if not a:
        raise ValueError("no episodes to compare")
    ids = sorted(a)
    x, y = [a[i] for i in ids], [b[i] for i in ids]
    n = len(ids)
    both = sum(p and q for p, q in zip(x, y))
    only_before = sum(p and not q for p, q in zip(x, y))
    only_after = sum(q and not p for p, q in zip(x, y))
    k0, k1 = sum(x), sum(y)
    return PairedSuccess(episodes=n, successes_before=k0, successes_after=k1, both=both, only_before=only_before,
                         only_after=only_after, neither=n - both - only_before - only_after, rate_before=k0 / n,
                         rate_after=k1 / n, ci95_before=wilson_interval(k0, n), ci95_after=wilson_interval(k1, n),
                         difference=round((k1 - k0) / n, 4),
                         difference_ci95=bootstrap_difference(x, y, resamples=resamples, seed=seed),
                         p_value=mcnemar_exact(only_before, only_after), failed_pairs=len(failed))


def sign_test_over_runs(before: Sequence[dict[str, Any]], afters: Sequence[Sequence[dict[str, Any]]]) -> float:
    """Two-sided p-value that several after-runs (seeds) differ from one before-run, task by task.

    The before-run is one run, so its episodes cannot be paired again with each seed's as if independent: each
    task counts once, by the sign of (its mean success over the after-runs) - (its success before), in an exact
    sign test (McNemar's, when there is one after-run).
    """
    a = _by_id(before, "before")
    runs = [_by_id(after, f"after {i}") for i, after in enumerate(afters)]
    for i, b in enumerate(runs):
        if b.keys() != a.keys():
            raise ValueError(f"after-run {i} did not play the before-run's episodes")
    diffs = [sum(b[k] for b in runs) / len(runs) - a[k] for k in a]
    return mcnemar_exact(sum(d < 0 for d in diffs), sum(d > 0 for d in diffs))


def _by_id(records: Sequence[dict[str, Any]], name: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for i, r in enumerate(records):
        if "episode_id" not in r or "success" not in r:
            raise ValueError(f"{name} record {i}: needs episode_id and success (an episodes_*.jsonl of textwm.eval)")
        key = str(r["episode_id"])
        if key in out:
            raise ValueError(f"{name}: episode {key!r} appears twice")
        out[key] = bool(r["success"])
    return out


def load_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The records of an ``episodes_real.jsonl`` (or of the one inside a folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "episodes_real.jsonl"
    if not p.is_file():
        raise DataError(f"{p}: no such episodes file (python -m textwm.eval --env ENV agent-real ... writes one)")
    return read_jsonl(p).rows


@dataclass
class PairedConfig:
    before: str = option(help="episodes_real.jsonl (or its folder) of the first run")
    after: str = option(help="episodes_real.jsonl (or its folder) of the second run")
    out: str = option("", "write the comparison as JSON here")
    resamples: int = option(RESAMPLES, "bootstrap resamples of the difference's interval")
    seed: int = option(0, "the bootstrap's seed")


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.eval.paired") -> int:
    parsed = ConfigCLI(PairedConfig, prog=prog, description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    try:
        result = compare(load_episodes(args.before), load_episodes(args.after), resamples=args.resamples,
                         seed=args.seed)
    except (DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.markdown())
    if args.out:
        write_json(args.out, result.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
