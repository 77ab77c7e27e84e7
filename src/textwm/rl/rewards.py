"""What each kind of episode earns, per env and reward rule, from built episodes of the env:

    python -m textwm.rl.rewards --env sciworld [--reward ours|paper] [--json]

The env's :meth:`~textwm.envs.contract.EnvSpec.reward_cases` builds one episode per outcome (success, partial
progress, nothing, a failure such as a wrong focus, a loop, unparseable replies); each is rewarded by the rule
GRPO would use (:mod:`textwm.rl.swift_adapters`: ``ours`` is :meth:`EnvSpec.reward`, ``paper`` is
:meth:`EnvSpec.paper_reward`), so the table is the reward as trained, not a description of it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.envs.contract import EnvSpec
from textwm.envs.registry import env_names, get_env


def reward_table(spec: EnvSpec, rule: str = "ours") -> list[dict[str, Any]]:
    """One row per built episode: its outcome, the reward under ``rule`` and why that reward leads to the task."""
    rows = []
    for name, outcome, episode, why in spec.reward_cases():
        value = spec.paper_reward(outcome, episode) if rule == "paper" else spec.reward(outcome)
        rows.append({"outcome": name, "end_reason": outcome.reason, "score": outcome.score,
                     "actions": len(episode.get("actions") or ()),
                     "reward": round(float(value), 4), "why": why})
    return rows


@dataclass
class RewardTableConfig:
    """The reward of each kind of episode ending, by an env's reward rule."""

    env: str = option(help="the env", choices=env_names())
    reward: str = option("ours", "the reward rule", choices=("ours", "paper"))
    json: bool = option(False, "print the rows as JSON")


def main(argv: list[str] | None = None, prog: str = "python -m textwm.rl.rewards") -> int:
    parsed = ConfigCLI(RewardTableConfig, prog=prog, description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    spec = get_env(args.env)
    if args.reward == "paper" and not spec.has_paper_reward:
        print(f"error: the paper's reward rule is not written for {args.env} yet", file=sys.stderr)
        return 2
    try:
        rows = reward_table(spec, args.reward)
    except NotImplementedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    ours = args.reward == "ours"
    print(f"{spec.title or spec.name}, reward rule {args.reward}:\n")
    print("| outcome | end reason | score | actions | reward |" + (" why |" if ours else ""))
    print("|---|---|---|---|---|" + ("---|" if ours else ""))
    for r in rows:
        print(f"| {r['outcome']} | {r['end_reason'] or 'going on'} | {r['score']:g} | {r['actions']} | "
              f"{r['reward']:+.3f} |" + (f" {r['why']} |" if ours else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
