"""How much of AppWorld the local responder answers, and how often it agrees with the real apps.

    python scripts/measure_appworld_responder.py --demos ../shared/data/appworld_sft_gpt_agent.jsonl
    python scripts/measure_appworld_responder.py runs/appworld_data/wm_*.jsonl

``--demos``: replays the paper's SFT demos (real AppWorld responses) through the responder, the demo's
accounts taken from its own passwords response (so that call agrees by construction; it is counted apart).
Files: the ``responder`` field every AppWorld WM transition carries (what the responder says to the same call
from the same state; None where it defers to the WM). Both print, per source and per responder rule: calls, coverage
(answered / calls) and agreement (answered and equal to the real response / answered; an access token is
compared by its JWT subject), plus the first disagreements. Exit status 1 when any answer disagrees.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl
from textwm.envs.appworld.demos import read_demo, responder_agreement, responder_rule, same_response


def from_rows(paths: list[str]) -> dict:
    stats: dict[str, Counter] = {}
    bad = []
    for path in paths:
        for row in read_jsonl(path).rows:
            s = stats.setdefault(row["source"], Counter())
            s["calls"] += 1
            if row["responder"] is None:
                continue
            s["answered"] += 1
            if same_response(row["responder"], row["messages"][-1]["content"]):
                s["agreed"] += 1
                s[f"rule:{responder_rule(row['tool'], row['responder'])}"] += 1
            else:
                bad.append({"task_id": row["task_id"], "tool": row["tool"], "ours": row["responder"],
                            "real": row["messages"][-1]["content"]})
    return {"per_source": {k: dict(v) for k, v in stats.items()}, "disagreements": bad[:20],
            "disagreed": len(bad)}


@dataclass
class ResponderConfig:
    files: list[str] = option(help="WM transition files of appworld/build_wm_dataset.py", positional=True,
                              default_factory=list)
    demos: str = option("", "the paper's SFT demos (appworld_sft_gpt_agent.jsonl)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(ResponderConfig, prog="scripts/measure_appworld_responder.py", description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    if not args.files and not args.demos:
        print("error: give --demos FILE and/or WM transition files", file=sys.stderr)
        return 2
    out, disagreed = {}, 0
    if args.demos:
        demos = [read_demo(r) for r in read_jsonl(args.demos).rows]
        out["demos"] = responder_agreement(demos).as_dict()
        disagreed += out["demos"]["answered"] - out["demos"]["agreed"]
    if args.files:
        out["transitions"] = from_rows(args.files)
        disagreed += out["transitions"]["disagreed"]
    print(json.dumps(out, indent=1))
    return 1 if disagreed else 0


if __name__ == "__main__":
    sys.exit(main())
