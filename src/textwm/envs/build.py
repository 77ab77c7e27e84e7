"""Dataset-builder plumbing for any env: real episodes -> world-model transitions, RL task rows, SFT demos.

An env supplies a :class:`DatasetBuilder` (``spec.dataset_builder()``): which jobs to play (one
task each, in a split), how to open its real env once per worker process, and how one job is
played into rows. Everything else is here, once: the worker processes, the ordering, the files
(``wm_{split}.jsonl``, ``rl_{split}.jsonl``, ``sft_{split}.jsonl``, all written atomically) and the
dataset card (``dataset_card.{md,json}``).

Jobs are seeded from (seed, task id), so the output does not depend on the number of workers. An env whose
episodes depend on what its process played before (ScienceWorld: its gold paths do) says so with
``fresh_env_per_job``, and each job then gets a new env.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import sys
import time
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from textwm.cli_checks import check_output_dir
from textwm.config import ConfigCLI, config_dict, option
from textwm.data.jsonl import write_file_set, write_json, write_jsonl
from textwm.envs.contract import EnvSpec
from textwm.envs.registry import get_env, spec_from_cli

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class BuildConfig:
    """Build a world-model dataset (and RL task rows, SFT demos) from the real env."""

    out_dir: str = option(help="writes wm_{train,dev,test}.jsonl, rl_*.jsonl, sft_*.jsonl and the dataset card")
    tasks: tuple[str, ...] | None = option(None, "task names (default: all)")
    train_variations: int = option(8, "tasks (variations) per task name from the train list")
    dev_variations: int = option(1, "per task name from the dev list")
    test_variations: int = option(1, "per task name from the test list")
    explore_episodes: int = option(1, "exploratory episodes per task")
    explore_steps: int = option(25, "exploratory actions per episode")
    workers: int = option(2, "worker processes (one real env each)")
    seed: int = option(0, "seed of the exploration")
    max_turns: int = option(50, "max_turns of the RL task rows")

    def __post_init__(self) -> None:
        for name in ("train_variations", "dev_variations", "test_variations", "explore_episodes", "explore_steps",
                     "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.workers < 1 or self.max_turns < 1:
            raise ValueError(f"workers and max_turns must be >= 1, got {self.workers} and {self.max_turns}")

    @property
    def variations(self) -> dict[str, int]:
        return {"train": self.train_variations, "dev": self.dev_variations, "test": self.test_variations}


@dataclass(frozen=True)
class Job:
    """One task to play: its id, family and split, its seed, and whatever else the env needs (``meta``)."""

    task_id: str
    family: str
    split: str
    seed: int
    meta: dict[str, Any] = field(default_factory=dict)


def job_seed(seed: int, task_id: str) -> int:
    return zlib.crc32(f"{seed}:{task_id}".encode())


@dataclass
class JobResult:
    job: Job
    #: World-model transitions (chat rows with the env's row fields, one of them ``source``).
    rows: list[dict[str, Any]]
    #: The RL task row of the job's task (None: none).
    rl: dict[str, Any] | None
    #: An SFT demonstration (the gold run, when it succeeded), else None.
    sft: dict[str, Any] | None
    #: Final score of the gold run (None: the job has none, e.g. transitions from recorded demos).
    gold_score: float | None


class DatasetBuilder(Protocol):
    """What an env supplies to :func:`build`."""

    #: Its config: :class:`BuildConfig` or a subclass with the env's own options.
    config_class: type[BuildConfig]
    #: One line for the dataset card: where the splits come from.
    split_note: str

    def plan(self, config: BuildConfig) -> list[Job]:
        """Every job of ``config``; ValueError naming an unknown task."""
        ...

    def open_env(self) -> Any:
        """The real env a worker process plays its jobs in (opened once per worker)."""
        ...

    def run_job(self, env: Any, job: Job, config: BuildConfig) -> JobResult: ...

    def demo_config(self, out_dir: Path, demo: Any) -> BuildConfig:
        """The small build of ``scripts/demo.sh`` (``demo``: its :class:`~textwm.experiments.demo_config.DemoConfig`); optional."""
        ...

    # Optional class attributes, read with getattr: ``fresh_env_per_job`` (True: each job gets a new env, closed
    # after it, because the env's episodes depend on what it played before; without it the output would
    # depend on which jobs a worker happened to take), ``small_agent_tasks`` (tuple of task types a small agent can
    # finish from a few gold demos: the demo's and the comparison's default agent tasks, textwm.envs.task_types),
    # ``demo_defaults`` and ``demo_smoke`` (DemoConfig settings of this env's demo and of its --smoke).


@dataclass
class BuildReport:
    out_dir: Path
    transitions: dict[str, int]
    tasks: int
    seconds: float
    gold_below_success: list[str]
    #: The task families built.
    families: list[str] = field(default_factory=list)


# One real env per worker process (opened by the pool's initializer; this module's only process state).
_worker: dict[str, Any] = {}


def _init_worker(builder: DatasetBuilder) -> None:
    _worker["builder"], _worker["env"], _worker["played"] = builder, builder.open_env(), False


def _run(args: tuple[Job, BuildConfig]) -> JobResult:
    job, config = args
    builder = _worker["builder"]
    if _worker["played"] and getattr(builder, "fresh_env_per_job", False):
        _worker["env"].close()       # an env that must be renewed must be closable (a JVM left running otherwise)
        _worker["env"] = builder.open_env()
    _worker["played"] = True
    return builder.run_job(_worker["env"], job, config)


def build(env: str | EnvSpec, config: BuildConfig) -> BuildReport:
    """Build everything of ``config`` for ``env`` into ``config.out_dir``."""
    spec = get_env(env) if isinstance(env, str) else env
    builder: DatasetBuilder | None = spec.dataset_builder()
    if builder is None:
        raise ValueError(f"env {spec.name!r} has no dataset builder")
    check_output_dir(config.out_dir, "--out-dir")
    jobs = builder.plan(config)
    started = time.perf_counter()
    results: list[JobResult] = []
    with ProcessPoolExecutor(max_workers=config.workers, initializer=_init_worker, initargs=(builder,)) as pool:
        futures = [pool.submit(_run, (job, config)) for job in jobs]
        for fut in tqdm(as_completed(futures), total=len(futures), desc=f"{spec.name} episodes", unit="task"):
            results.append(fut.result())
    results.sort(key=lambda r: (SPLITS.index(r.job.split), r.job.family, r.job.task_id))
    out = Path(config.out_dir)
    by_split: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_split[r.job.split].extend(r.rows)
    writers: dict[str, Any] = {}
    for split in SPLITS:
        mine = [r for r in results if r.job.split == split]
        if not mine:
            continue
        writers[f"wm_{split}.jsonl"] = lambda p, rows=by_split[split]: write_jsonl(p, rows)
        writers[f"rl_{split}.jsonl"] = lambda p, mine=mine: write_jsonl(p, [r.rl for r in mine if r.rl is not None])
        writers[f"sft_{split}.jsonl"] = lambda p, mine=mine: write_jsonl(p, [r.sft for r in mine if r.sft is not None])
    seconds = time.perf_counter() - started
    card = dataset_card(spec, builder, results, config, seconds)
    writers["dataset_card.json"] = lambda p: write_json(p, card)
    writers["dataset_card.md"] = lambda p: p.write_text(card_markdown(card), encoding="utf-8")
    # One set: an earlier build's files (a split this one has not) never stay beside this one's.
    write_file_set(out, writers, replaces=[f"{kind}_{split}.jsonl" for kind in ("wm", "rl", "sft") for split in SPLITS]
                   + ["dataset_card.json", "dataset_card.md"])
    return BuildReport(out_dir=out, transitions={s: len(v) for s, v in by_split.items()},
                       tasks=len({j.family for j in jobs}), seconds=seconds,
                       gold_below_success=card["gold_below_success"], families=sorted({j.family for j in jobs}))


def _length_stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(values), 1), "p50": ordered[len(ordered) // 2],
            "p95": ordered[int(len(ordered) * 0.95) - 1 if len(ordered) > 1 else 0], "max": ordered[-1]}


def dataset_card(spec: EnvSpec, builder: DatasetBuilder, results: list[JobResult], config: BuildConfig,
                 seconds: float) -> dict[str, Any]:
    per_task: dict[str, Counter] = defaultdict(Counter)
    per_source: Counter = Counter()
    prompt_words, target_words = [], []
    tasks: dict[str, set] = defaultdict(set)
    for r in results:
        tasks[r.job.split].add(r.job.task_id)
        for row in r.rows:
            per_task[r.job.family][r.job.split] += 1
            per_source[row.get("source", "?")] += 1
            prompt_words.append(sum(len(m["content"].split()) for m in row["messages"][:-1]))
            target_words.append(len(row["messages"][-1]["content"].split()))
    return {
        "env": spec.name, "title": spec.title or spec.name, "split_note": builder.split_note,
        "config": config_dict(config) if dataclasses.is_dataclass(config) else {}, "seconds": round(seconds, 1),
        "transitions": {s: sum(c[s] for c in per_task.values()) for s in SPLITS},
        "variations": {s: len(v) for s, v in tasks.items()},
        "per_task": {t: dict(c) for t, c in sorted(per_task.items())},
        "per_source": dict(per_source),
        "length_words": {"prompt": _length_stats(prompt_words), "target": _length_stats(target_words)},
        "sft_demos": sum(r.sft is not None for r in results),
        "gold_below_success": sorted(r.job.task_id for r in results
                                     if r.gold_score is not None and not spec.is_success(r.gold_score)),
    }


def card_markdown(card: dict[str, Any]) -> str:
    lines = [f"# {card['title']} world-model dataset", "",
             f"Built from the real {card['title']} env (gold and exploratory episodes). {card['split_note']}", "",
             f"- transitions: {card['transitions']}", f"- tasks per split: {card['variations']}",
             f"- by source: {card['per_source']}", f"- SFT demos (gold runs that succeeded): {card['sft_demos']}",
             f"- prompt length (words, system + user): {card['length_words']['prompt']}",
             f"- target length (words): {card['length_words']['target']}",
             f"- build time: {card['seconds']} s", "", "| task | train | dev | test |", "|---|---|---|---|"]
    for task, counts in card["per_task"].items():
        lines.append(f"| {task} | {counts.get('train', 0)} | {counts.get('dev', 0)} | {counts.get('test', 0)} |")
    if card["gold_below_success"]:
        lines += ["", f"Gold runs that did not succeed: {', '.join(card['gold_below_success'])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, *, env: str | None = None, prog: str | None = None) -> int:
    """``python -m textwm.envs.build --env NAME --out-dir DIR ...`` (or an env's wrapper with ``env`` fixed)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or "python -m textwm.envs.build"
    spec = spec_from_cli(argv, env, prog, "--out-dir DIR [flags]")
    if spec is None:
        return 2
    builder = spec.dataset_builder()
    if builder is None:
        print(f"error: env {spec.name!r} has no dataset builder", file=sys.stderr)
        return 2
    parsed = ConfigCLI(builder.config_class, prog=prog, key_values=False,
                       description=builder.config_class.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        report = build(spec, config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{sum(report.transitions.values())} transitions {report.transitions} over {report.tasks} task types "
          f"in {report.seconds:.0f} s -> {report.out_dir} (card: dataset_card.md)")
    if report.gold_below_success:
        print(f"gold runs that did not succeed: {', '.join(report.gold_below_success)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
