"""Coverage and agreement of the ScienceWorld local responder on real episodes.

Plays gold and exploratory episodes in the real env; before each step asks the responder, then
compares its answer with the env's observation. Coverage = share of steps it answers; agreement =
share of its answers equal to the env's (must be 100%: a disagreement is a bug). Disagreements are
written to --out for inspection.

    python scripts/measure_sciworld_responder.py --episodes 120 --workers 2
"""

import argparse
import json
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from textwm.envs.sciworld.env import SciWorldEnv, task_catalog
from textwm.envs.sciworld.explore import episode_actions
from textwm.envs.sciworld.responder import respond
from textwm.envs.sciworld.tasks import bake_task
from textwm.envs.sciworld.tracker import EpisodeTracker
from textwm.envs.sciworld.world import normalize_action


def run_worker(args):
    jobs, seed = args
    rng = random.Random(seed)
    env = SciWorldEnv()
    stats = Counter()
    by_rule = Counter()
    bad = []
    try:
        for task_id, kind in jobs:
            task = bake_task(env, task_id, gold_path=True)
            gold = env.gold_actions()
            tracker = EpisodeTracker(task)
            actions = ((a, "gold") for a in gold) if kind == "gold" else episode_actions(
                rng, env, tracker, gold, explore_steps=30)
            for action, _kind in actions:
                answer = respond(tracker, action)
                result = env.step(action)
                stats["steps"] += 1
                if answer is not None:
                    stats["answered"] += 1
                    rule = normalize_action(action).split(" ")[0]
                    by_rule[rule] += 1
                    if answer == result.observation:
                        stats["agree"] += 1
                    else:
                        bad.append({"task_id": task_id, "action": action, "responder": answer,
                                    "env": result.observation, "history": tracker.history[-4:]})
                tracker.observe(action, result.observation)
                if result.done:
                    break
            stats["episodes"] += 1
    finally:
        env.close()
    return stats, by_rule, bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=120, help="half gold, half exploratory")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/responder_disagreements.jsonl")
    args = p.parse_args()
    rng = random.Random(args.seed)
    catalog = task_catalog()
    jobs = []
    tasks = sorted(catalog)
    for i in range(args.episodes):
        task = tasks[i % len(tasks)]
        variations = catalog[task]["train"] + catalog[task]["dev"] + catalog[task]["test"]
        jobs.append((f"{task}_v{rng.choice(variations)}", "gold" if i % 2 == 0 else "explore"))
    shards = [(jobs[w::args.workers], args.seed + w) for w in range(args.workers)]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(run_worker, shards))
    stats, by_rule, bad = Counter(), Counter(), []
    for s, r, b in results:
        stats.update(s)
        by_rule.update(r)
        bad.extend(b)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(b) + "\n" for b in bad))
    print(f"{stats['episodes']} episodes, {stats['steps']} steps in {time.perf_counter() - started:.0f} s")
    print(f"coverage: {stats['answered'] / max(stats['steps'], 1):.1%} ({stats['answered']} steps answered)")
    print(f"agreement: {stats['agree'] / max(stats['answered'], 1):.2%} ({stats['answered'] - stats['agree']} disagreements"
          f" -> {out})")
    print("answered by first word:", dict(by_rule.most_common()))
    return 0 if stats["agree"] == stats["answered"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
