"""How much of ALFWorld the local responder answers, and how often it agrees with the real game.

    python scripts/bench_alfworld_responder.py runs/alfworld_data/wm_*.jsonl
    python scripts/bench_alfworld_responder.py --rows ROWS.jsonl --episodes D/episodes_real.jsonl

The first form reads the ``responder`` field every ALFWorld WM transition carries (what the responder says
to the same action from the same tracked state, None where it defers to the WM). The second replays real
episodes (``eval_parallel.py``'s ``episodes_real.jsonl``) through the tracker of each row's scene, as the
simulator would: where the responder defers, the real observation stands in for the WM's answer. Both
print, per source and overall: steps, coverage (answered / steps) and agreement (answered and equal to the
real observation / answered), plus the first disagreements.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass

from textwm.config import ConfigCLI, option


@dataclass
class AlfResponderConfig:
    files: list[str] = option(help="wm_*.jsonl of alfworld/build_wm_dataset.py", positional=True, default_factory=list)
    rows: str = option("", "RL rows the episodes played (with --episodes)")
    episodes: str = option("", "episodes_real.jsonl of eval_parallel.py / python -m textwm.eval")


def transitions(args: AlfResponderConfig):
    """(episode, task id, source, action, what the responder said, the real observation) per step."""
    if not args.episodes:
        for path in args.files:
            with open(path) as f:
                for line in f:
                    row = json.loads(line)
                    yield (row["episode"], row["task_id"], row["source"], row["messages"][1]["content"][-60:],
                           row["responder"], row["messages"][-1]["content"])
        return
    from textwm.data.jsonl import read_jsonl
    from textwm.envs import get_env
    from textwm.envs.alfworld.responder import respond
    from textwm.envs.alfworld.sim import AlfWorldEpisode

    spec = get_env("alfworld")
    starts = {s.task_id: s for s in read_jsonl(args.rows, validate=lambda r: spec.load_row(r, need_sim=True)).rows}
    for record in read_jsonl(args.episodes).rows:
        episode = AlfWorldEpisode.start(starts[record["task_id"]].sim_task)
        for action, real in zip(record["actions"], record["observations"]):
            if action is None or real is None:
                continue
            said = respond(episode.tracker, action)
            yield record["episode_id"], record["task_id"], "local" if said is not None else "wm", action, said, real
            episode.observe(action, real, "real")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(AlfResponderConfig, prog="scripts/bench_alfworld_responder.py", description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    if bool(args.rows) != bool(args.episodes) or not (args.files or args.episodes):
        print("error: give wm_*.jsonl files, or --rows and --episodes", file=sys.stderr)
        return 2
    steps, answered, agreed = Counter(), Counter(), Counter()
    episodes, wrong = set(), []
    for episode, task_id, src, query, said, real in transitions(args):
        episodes.add(episode)
        for key in (src, "all"):
            steps[key] += 1
            answered[key] += said is not None
            agreed[key] += said == real
        if said is not None and said != real and len(wrong) < 10:
            wrong.append((task_id, query, said, real))
    print(f"{len(episodes)} real episodes, {steps['all']} steps")
    print("| source | steps | coverage | agreement |\n|---|---|---|---|")
    for key in sorted(steps, key=lambda k: (k == "all", k)):
        cov = answered[key] / steps[key]
        agr = agreed[key] / answered[key] if answered[key] else float("nan")
        print(f"| {key} | {steps[key]} | {cov:.3f} | {agr:.4f} ({agreed[key]}/{answered[key]}) |")
    for task_id, query, said, real in wrong:
        print(f"DISAGREE {task_id}: ...{query!r}\n  responder: {said!r}\n  real:      {real!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
