"""Coverage and agreement of the ScienceWorld local responder on real episodes.

Plays gold and exploratory episodes in the real env; before each step asks the responder, then
compares its answer with the env's observation. Coverage = share of steps it answers; agreement =
share of its answers equal to the env's (must be 100%: a disagreement is a bug). Disagreements are
written to --out for inspection.

``--focus-probes N`` also puts N focus actions to the responder before each step, on objects named anywhere in
the task's start listings or in a pool of animals; each one it refuses is put to the real env too, which must
refuse it as well (a refusal changes nothing, so the episode goes on).

    python scripts/measure_sciworld_responder.py --episodes 120 --workers 2 --focus-probes 3
"""

import json
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option
from textwm.envs.sciworld.env import SciWorldEnv, task_catalog
from textwm.envs.sciworld.explore import episode_actions
from textwm.envs.sciworld.probes import ANIMAL_POOL, listed_objects
from textwm.envs.sciworld.responder import LISTING_FRESH_TICKS, respond
from textwm.envs.sciworld.tasks import bake_task
from textwm.envs.sciworld.tracker import EpisodeTracker
from textwm.envs.sciworld.world import NO_MATCH, normalize_action


def focus_candidates(task) -> list[str]:
    """Objects named in any room's start listing or accepted there by the parser, and the probe animals (most are
    absent from a given room)."""
    names = {name.split(" (")[0].split(",")[0] for text in task.room_map.values() for name in listed_objects(text)}
    return sorted(names | {n for room in task.room_objects.values() for n in room} | set(ANIMAL_POOL))


def probe_focus(env, tracker, rng, candidates, n, stats, by_rule, bad, task_id) -> bool:
    """Up to ``n`` focus probes at this state; False when the real env accepted a focus the responder refused (the
    env's state has changed: the episode stops)."""
    for target in rng.sample(candidates, min(n, len(candidates))):
        action = f"focus on {target}"
        if respond(tracker, action) != NO_MATCH:
            continue
        stats["focus_refused"] += 1
        by_rule["focus"] += 1
        observation = env.step(action).observation
        if observation == NO_MATCH:
            stats["focus_agree"] += 1
            continue
        bad.append({"task_id": task_id, "action": action, "responder": NO_MATCH, "env": observation,
                    "history": tracker.history[-4:]})
        return False
    return True


def probe_accepted_focus(env, task, rng, candidates, n, stats, by_rule, bad) -> None:
    """Up to ``n`` focus actions the responder accepts at the start (objects of the start listing, their other
    names), each from a fresh reset of the real env after 0 to LISTING_FRESH_TICKS waits, whose answer must be the
    same; the env is left reset at time 0 (gold path loaded)."""
    tracker = EpisodeTracker(task)
    accepted = [c for c in candidates if (respond(tracker, f"focus on {c}") or "").startswith("You focus on")]
    for target in rng.sample(accepted, min(n, len(accepted))):
        action = f"focus on {target}"
        env.reset(task.task_id, simplification=task.simplification)
        tracker = EpisodeTracker(task)
        for _ in range(rng.randint(0, LISTING_FRESH_TICKS)):     # time passing, up to what the rule allows
            tracker.observe("wait1", env.step("wait1").observation)
        answer = respond(tracker, action)
        if answer is None or not answer.startswith("You focus on"):
            continue
        observation = env.step(action).observation
        stats["focus_accepted"] += 1
        by_rule["focus"] += 1
        if observation == answer:
            stats["focus_accepted_agree"] += 1
        else:
            bad.append({"task_id": task.task_id, "action": action, "responder": answer, "env": observation,
                        "history": []})
    env.reset(task.task_id, simplification=task.simplification, gold_path=True)


def run_worker(args):
    jobs, seed, focus_probes = args
    rng = random.Random(seed)
    env = SciWorldEnv()
    stats = Counter()
    by_rule = Counter()
    bad = []
    try:
        for task_id, kind in jobs:
            task = bake_task(env, task_id, gold_path=True)
            gold = env.gold_actions()
            candidates = focus_candidates(task)
            if focus_probes:
                probe_accepted_focus(env, task, rng, candidates, focus_probes, stats, by_rule, bad)
            tracker = EpisodeTracker(task)
            actions = ((a, "gold") for a in gold) if kind == "gold" else episode_actions(
                rng, env, tracker, gold, explore_steps=30)
            for action, _kind in actions:
                if focus_probes and not probe_focus(env, tracker, rng, candidates, focus_probes, stats, by_rule,
                                                    bad, task_id):
                    break
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


@dataclass
class SciResponderConfig:
    episodes: int = option(120, "half gold, half exploratory")
    workers: int = option(2, "worker processes (a real env each)")
    seed: int = option(0, "seed of the episodes")
    focus_probes: int = option(0, "focus probes before each step (see above)")
    out: str = option("runs/responder_disagreements.jsonl", "the disagreements, one per line")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(SciResponderConfig, prog="scripts/measure_sciworld_responder.py", description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    rng = random.Random(args.seed)
    catalog = task_catalog()
    jobs = []
    tasks = sorted(catalog)
    for i in range(args.episodes):
        task = tasks[i % len(tasks)]
        variations = catalog[task]["train"] + catalog[task]["dev"] + catalog[task]["test"]
        jobs.append((f"{task}_v{rng.choice(variations)}", "gold" if i % 2 == 0 else "explore"))
    shards = [(jobs[w::args.workers], args.seed + w, args.focus_probes) for w in range(args.workers)]
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
    if args.focus_probes:
        print(f"focus probes refused: {stats['focus_refused']}, the env refused {stats['focus_agree']} of them")
        print(f"focus probes accepted at the start: {stats['focus_accepted']}, the env gave the same answer to "
              f"{stats['focus_accepted_agree']} of them")
    ok = (stats["agree"] == stats["answered"] and stats["focus_agree"] == stats["focus_refused"]
          and stats["focus_accepted_agree"] == stats["focus_accepted"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
