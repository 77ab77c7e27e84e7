"""Build ScienceWorld datasets from the real env: world-model transitions and agent-side data.

Per task variation (ScienceWorld's own train/dev/test variation lists decide the split, so no
variation is shared between splits): the gold episode, and exploratory episodes (a random gold
prefix, then valid, navigation, look and rejected actions; :mod:`textwm.envs.sciworld.explore`).
Every step becomes one chat row: system = the WM prompt at that step, user = ``State: <history>
\\n\\nAction: <action>``, assistant = the real next observation. The gold episode also yields an RL
task row and (when it reaches 100) an SFT demo.

Work is spread over worker processes (one JVM each); jobs are seeded from (seed, task id), so the
output does not depend on the number of workers. Files are written atomically with a dataset card.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import statistics
import time
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from textwm.data.jsonl import atomic_write, write_json, write_jsonl
from textwm.envs.sciworld.env import SPLITS, SciWorldEnv, task_catalog
from textwm.envs.sciworld.explore import episode_actions
from textwm.envs.sciworld.reward import goals_from_gold
from textwm.envs.sciworld.tasks import bake_task
from textwm.envs.sciworld.tracker import EpisodeTracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildConfig:
    out_dir: str
    #: Task names (None: all 30).
    tasks: tuple[str, ...] | None = None
    #: Variations per task and split, taken in ScienceWorld's order (0 = none of that split).
    variations: dict[str, int] = field(default_factory=lambda: {"train": 8, "dev": 1, "test": 1})
    explore_episodes: int = 1
    explore_steps: int = 25
    workers: int = 2
    seed: int = 0
    max_turns: int = 50
    #: WM prompt layout of the rows (and of the RL tasks' simulator): "full" or "compact".
    prompt_style: str = "full"


@dataclass(frozen=True)
class Job:
    task_id: str
    task: str
    variation: int
    split: str
    seed: int


def plan(config: BuildConfig) -> list[Job]:
    from textwm.envs.sciworld.wm_prompt import PROMPT_STYLES

    if config.prompt_style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {', '.join(PROMPT_STYLES)}, got {config.prompt_style!r}")
    catalog = task_catalog()
    tasks = config.tasks or tuple(sorted(catalog))
    unknown = sorted(set(tasks) - set(catalog))
    if unknown:
        raise ValueError(f"unknown ScienceWorld task(s): {', '.join(unknown)}")
    jobs = []
    for task in tasks:
        for split in SPLITS:
            for variation in catalog[task][split][: config.variations.get(split, 0)]:
                task_id = f"{task}_v{variation}"
                jobs.append(Job(task_id, task, variation, split, seed=zlib.crc32(f"{config.seed}:{task_id}".encode())))
    return jobs


def _transition(tracker: EpisodeTracker, state: tuple[str, str], action: str, observation: str, job: Job, step: int,
                source: str, episode: str) -> dict[str, Any]:
    """One chat row; ``state`` = the real (room contents, inventory) when the action was taken."""
    from textwm.envs.sciworld.wm_prompt import wm_messages

    messages = [*wm_messages(tracker, action, room_contents=state[0], inventory=state[1]),
                {"role": "assistant", "content": observation}]
    return {"messages": messages, "task_id": job.task_id, "task": job.task, "variation": job.variation,
            "split": job.split, "episode": episode, "step": step, "source": source}


_ENV: SciWorldEnv | None = None


def _worker_env() -> SciWorldEnv:
    global _ENV
    if _ENV is None:
        _ENV = SciWorldEnv()
    return _ENV


def run_job(job: Job, config: BuildConfig) -> dict[str, Any]:
    """Play one variation's episodes; returns its transitions, RL row and SFT demo."""
    from textwm.envs.sciworld.agent import rl_row, sft_row

    env = _worker_env()
    rng = random.Random(job.seed)
    task = dataclasses.replace(bake_task(env, job.task_id, gold_path=True), prompt_style=config.prompt_style)
    gold = env.gold_actions()
    rows, steps, score = [], [], 0.0
    tracker = EpisodeTracker(task)
    for i, action in enumerate(gold):
        state = (env.look(), env.inventory())
        result = env.step(action)
        rows.append(_transition(tracker, state, action, result.observation, job, i, "gold", f"{job.task_id}/gold"))
        tracker.observe(action, result.observation)
        steps.append((action, result.observation, result.score))
        score = result.score
        if result.done:
            break
    task = dataclasses.replace(task, goals=goals_from_gold(steps).to_dict())
    for k in range(config.explore_episodes):
        env.reset(job.task_id, gold_path=False)
        tracker = EpisodeTracker(task)
        for i, (action, kind) in enumerate(episode_actions(rng, env, tracker, gold, explore_steps=config.explore_steps)):
            state = (env.look(), env.inventory())
            result = env.step(action)
            rows.append(_transition(tracker, state, action, result.observation, job, i, kind,
                                    f"{job.task_id}/explore{k}"))
            tracker.observe(action, result.observation)
            if result.done:
                break
    # Long tasks (boil's gold run is ~100 steps) need more turns than the default allows.
    max_turns = max(config.max_turns, 2 * len(steps))
    return {"job": job, "rows": rows, "rl": rl_row(task, max_turns=max_turns),
            "sft": sft_row(task, [(a, o) for a, o, _ in steps], score) if score >= 100 else None,
            "gold_score": score}


def _run(args: tuple[Job, BuildConfig]) -> dict[str, Any]:
    return run_job(*args)


@dataclass
class BuildReport:
    out_dir: Path
    transitions: dict[str, int]
    tasks: int
    seconds: float
    gold_below_100: list[str]


def build(config: BuildConfig) -> BuildReport:
    """Build everything into ``config.out_dir``: ``wm_{split}.jsonl``, ``rl_{split}.jsonl``,
    ``sft_{split}.jsonl``, ``dataset_card.md`` and ``dataset_card.json``."""
    jobs = plan(config)
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=config.workers) as pool:
        futures = [pool.submit(_run, (job, config)) for job in jobs]
        for fut in tqdm(as_completed(futures), total=len(futures), desc="sciworld episodes", unit="variation"):
            results.append(fut.result())
    results.sort(key=lambda r: (r["job"].split, r["job"].task, r["job"].variation))
    out = Path(config.out_dir)
    by_split: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_split[r["job"].split].extend(r["rows"])
    for split in SPLITS:
        mine = [r for r in results if r["job"].split == split]
        if not mine:
            continue
        write_jsonl(out / f"wm_{split}.jsonl", by_split[split])
        write_jsonl(out / f"rl_{split}.jsonl", [r["rl"] for r in mine])
        write_jsonl(out / f"sft_{split}.jsonl", [r["sft"] for r in mine if r["sft"] is not None])
    seconds = time.perf_counter() - started
    below = sorted(r["job"].task_id for r in results if r["gold_score"] < 100)
    card = dataset_card(results, config, seconds)
    write_json(out / "dataset_card.json", card)
    with atomic_write(out / "dataset_card.md") as f:
        f.write(card_markdown(card))
    return BuildReport(out_dir=out, transitions={s: len(v) for s, v in by_split.items()}, tasks=len({j.task for j in jobs}),
                       seconds=seconds, gold_below_100=below)


def _length_stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(values), 1), "p50": ordered[len(ordered) // 2],
            "p95": ordered[int(len(ordered) * 0.95) - 1 if len(ordered) > 1 else 0], "max": ordered[-1]}


def dataset_card(results: list[dict[str, Any]], config: BuildConfig, seconds: float) -> dict[str, Any]:
    per_task: dict[str, Counter] = defaultdict(Counter)
    per_source: Counter = Counter()
    prompt_words, target_words = [], []
    variations: dict[str, set] = defaultdict(set)
    for r in results:
        job = r["job"]
        variations[job.split].add(job.task_id)
        for row in r["rows"]:
            per_task[job.task][job.split] += 1
            per_source[row["source"]] += 1
            prompt_words.append(sum(len(m["content"].split()) for m in row["messages"][:-1]))
            target_words.append(len(row["messages"][-1]["content"].split()))
    return {
        "config": asdict(config), "seconds": round(seconds, 1),
        "transitions": {s: sum(c[s] for c in per_task.values()) for s in SPLITS},
        "variations": {s: len(v) for s, v in variations.items()},
        "per_task": {t: dict(c) for t, c in sorted(per_task.items())},
        "per_source": dict(per_source),
        "length_words": {"prompt": _length_stats(prompt_words), "target": _length_stats(target_words)},
        "sft_demos": sum(r["sft"] is not None for r in results),
        "gold_below_100": sorted(r["job"].task_id for r in results if r["gold_score"] < 100),
    }


def card_markdown(card: dict[str, Any]) -> str:
    lines = ["# ScienceWorld world-model dataset", "",
             "Built from the real ScienceWorld env (gold and exploratory episodes); splits follow ScienceWorld's "
             "own train/dev/test variation lists, so no variation appears in two splits.", "",
             f"- transitions: {card['transitions']}", f"- variations: {card['variations']}",
             f"- by source: {card['per_source']}", f"- SFT demos (gold runs scoring 100): {card['sft_demos']}",
             f"- prompt length (words, system + user): {card['length_words']['prompt']}",
             f"- target length (words): {card['length_words']['target']}",
             f"- build time: {card['seconds']} s", "", "| task | train | dev | test |", "|---|---|---|---|"]
    for task, counts in card["per_task"].items():
        lines.append(f"| {task} | {counts.get('train', 0)} | {counts.get('dev', 0)} | {counts.get('test', 0)} |")
    if card["gold_below_100"]:
        lines += ["", f"Gold runs below 100: {', '.join(card['gold_below_100'])}"]
    return "\n".join(lines) + "\n"
