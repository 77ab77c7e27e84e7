"""Seed every RL row's world in the real AppWorld apps; print what each table kept, the reset time, and how many
of a few real calls (passwords, a login per account, a listing per app) succeed.

    python scripts/measure_appworld_seeding.py --rows data/appworld_rl.jsonl [--appworld-python PATH] [--json OUT]

Needs AppWorld's interpreter (appworld/setup_appworld.sh). CPU, about 2 s a row.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass

from textwm.config import ConfigCLI, option
from textwm.envs.appworld.real import AppWorldEnv, AppWorldSessionConfig, smoke_calls


@dataclass
class SeedingConfig:
    rows: str = option(help="RL-row JSONL file")
    appworld_python: str = option("", "AppWorld's interpreter (default: found)")
    json: str = option("", "also write the per-row results here")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(SeedingConfig, prog="scripts/measure_appworld_seeding.py", description=__doc__,
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    env = AppWorldEnv(AppWorldSessionConfig(rows=[args.rows], appworld_python=args.appworld_python))
    results, totals = [], [0, 0]
    print(f"{'task':<11} {'reset s':>7} {'calls ok':>8}  tables: seeded/parsed (skipped)")
    try:
        for task_id, task in env.tasks.items():
            reset = env.reset(task_id)
            calls = smoke_calls(task)
            failed = [c for c in calls if "error" in json.loads(env.step(c).observation)]
            ok = len(calls) - len(failed)
            totals[0], totals[1] = totals[0] + ok, totals[1] + len(calls)
            tables = reset.info["seed_report"]["tables"]
            cells = ", ".join(f"{name} {t['seeded']}/{t['parsed']}" + (f" ({t['skipped']})" if t["skipped"] else "")
                              for name, t in tables.items())
            print(f"{task_id:<11} {reset.info['reset_s']:>7.2f} {ok:>4}/{len(calls):<3}  {cells}")
            results.append({"task_id": task_id, "reset_s": reset.info["reset_s"], "calls": len(calls), "ok": ok,
                            "failed": failed, "seed_report": reset.info["seed_report"]})
    finally:
        env.close()
    print(f"calls ok: {totals[0]}/{totals[1]} over {len(results)} rows")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0 if totals[0] == totals[1] else 1


if __name__ == "__main__":
    sys.exit(main())
