"""Folders of ALFWorld games: generated offline, rebuilt from paper rows, and the games of a row file.

Layout (ALFWorld's own): ``<root>/<split>/<task_type>-<Target>-<Mrecep>-<Destination|Lamp>-<floor plan>/
<trial>/{game.tw-pddl,traj_data.json}``; a task id is the path below the root.

* :func:`generate_games` — ``num_games`` solvable games over the six task types, split by floor plan
  (:func:`~textwm.envs.alfworld.generate.split_floor_plans`); each is played by the handcoded expert
  and kept when it wins within :data:`EXPERT_STEPS` (ALFWorld's ``solvable`` rule);
* :func:`games_for_rows` — the game of every RL row: the row's own ``game_file`` or the downloaded game
  where it exists, else one rebuilt from the row's scene under ``<root>``.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textwm.cli_checks import check_output_dir
from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs.alfworld.alfred import TASK_TYPES
from textwm.envs.alfworld.env import AlfWorldEnv, AlfWorldSessionConfig, games_roots
from textwm.envs.alfworld.games import GAME_FILE, thor_class, write_game
from textwm.envs.alfworld.generate import SPLITS, GameSpec, can_host, sample_scene, split_floor_plans
from textwm.envs.alfworld.scene import Scene
from textwm.envs.registry import get_env

log = logging.getLogger(__name__)

#: Steps the handcoded expert gets to win a generated game (the paper's evaluation turn limit).
EXPERT_STEPS = 50
#: Scenes tried per game before giving up on it.
ATTEMPTS = 20


def task_folder(scene: Scene) -> str:
    g = scene.goal
    last = g.toggle or g.destination
    return (f"{g.task_type}-{thor_class(g.target)}-{thor_class(g.mrecep) if g.mrecep else 'None'}-"
            f"{thor_class(last) if last else 'None'}-{scene.floor_plan}")


def play_expert(env: AlfWorldEnv, task_id: str, steps: int = EXPERT_STEPS) -> list[str] | None:
    """The expert's winning walkthrough of a game, None when it does not win within ``steps``."""
    reset = env.reset(task_id)
    action, walkthrough = reset.info["expert_action"], []
    for _ in range(steps):
        result = env.step(action)
        walkthrough.append(action)
        if result.score >= 1.0:
            return walkthrough
        action = result.info["expert_action"] or "look"
    return None


@dataclass
class GenerateReport:
    games: dict[str, int]
    per_task_type: dict[str, dict[str, int]]
    #: Scenes the expert did not win (dropped, as alfworld-generate drops unsolvable games).
    dropped: int
    #: Scenes the expert played (kept + dropped).
    tried: int
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


_env: dict[str, AlfWorldEnv] = {}


def _worker_env(root: str) -> AlfWorldEnv:
    if root not in _env:
        _env[root] = AlfWorldEnv(AlfWorldSessionConfig(games_dir=[root]))
    return _env[root]


def _make_game(args: tuple[str, str, str, int, list[int]]) -> tuple[str | None, int]:
    """One solvable game of ``task_type`` in ``split``: (its task id or None, scenes the expert lost)."""
    root, split, task_type, seed, plans = args
    rng = random.Random(f"{seed}-{split}-{task_type}")
    plans = [p for p in plans if can_host(task_type, p)]  # e.g. 2 of the 12 unseen floor plans have a desk lamp
    if not plans:
        return None, 0
    env = _worker_env(root)
    lost = 0
    for _ in range(ATTEMPTS):
        scene = sample_scene(GameSpec(task_type, rng.choice(plans), rng.randrange(1 << 30)))
        if scene is None:  # the floor plan cannot host the task type
            continue
        task_id = f"{split}/{task_folder(scene)}/trial_{seed:05d}"
        write_game(scene, Path(root) / task_id)
        walkthrough = play_expert(env, task_id)
        if walkthrough is not None:
            write_game(scene, Path(root) / task_id, walkthrough=walkthrough)
            return task_id, lost
        lost += 1
        for name in (GAME_FILE, "traj_data.json"):
            (Path(root) / task_id / name).unlink()
        (Path(root) / task_id).rmdir()
    return None, lost


def generate_games(out_dir: str | Path, num_games: int, *, seed: int = 0, eval_fraction: float = 0.1,
                   workers: int = 2, per_type: Mapping[str, int] | None = None,
                   task_types: Sequence[str] | None = None) -> GenerateReport:
    """``num_games`` games: ``eval_fraction`` of them each in eval_in_distribution and eval_out_of_distribution,
    the rest in train; task types in turn. ``per_type`` (split -> games per task type) replaces both counts."""
    started = time.perf_counter()
    plans = split_floor_plans(seed)
    types = tuple(task_types or TASK_TYPES)
    if per_type is not None:
        counts = {split: per_type.get(split, 0) * len(types) for split in SPLITS}
    else:
        n_eval = round(num_games * eval_fraction)
        counts = {"train": num_games - 2 * n_eval, "eval_in_distribution": n_eval, "eval_out_of_distribution": n_eval}
    jobs = []
    for split in SPLITS:
        pool = plans["unseen"] if split == "eval_out_of_distribution" else plans["seen"]
        for k in range(counts[split]):
            jobs.append((str(out_dir), split, types[k % len(types)], seed * 1_000_003 + len(jobs), pool))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    made: Counter = Counter()
    per_type: dict[str, Counter] = {s: Counter() for s in SPLITS}
    dropped = 0
    failures = []
    with ProcessPoolExecutor(max_workers=workers) as executor:
        for job, (task_id, lost) in zip(jobs, executor.map(_make_game, jobs)):
            dropped += lost
            if task_id is None:
                failures.append(f"{job[1]}/{job[2]}")
                continue
            made[job[1]] += 1
            per_type[job[1]][job[2]] += 1
    return GenerateReport(dict(made), {s: dict(c) for s, c in per_type.items()}, dropped,
                          sum(made.values()) + dropped, time.perf_counter() - started, failures)


# --- the games of RL rows ----------------------------------------------------------------------------------


@dataclass
class RowGames:
    """Where the games of a row file are: the roots to start the env with, and how each row's game was found."""

    roots: list[str]
    #: task id -> ``existing`` (the row's game_file or the downloaded data) or ``rebuilt``.
    sources: dict[str, str]


def games_for_rows(rows: Sequence[Mapping[str, Any]], starts: Sequence[Any], rebuild_root: str | Path) -> RowGames:
    """Find or rebuild the game of every row (``starts``: the rows' :class:`~textwm.envs.contract.TaskStart`)."""
    rebuild_root = Path(rebuild_root).resolve()
    roots: list[Path] = []
    sources: dict[str, str] = {}
    known = games_roots()
    for row, start in zip(rows, starts):
        game_file = row.get("game_file")
        own = Path(game_file) if isinstance(game_file, str) else None
        if own is not None and own.is_file() and own.parent.as_posix().endswith(start.task_id):
            root = Path(own.parent.as_posix()[: -len(start.task_id)]).resolve()
            if root not in roots:
                roots.append(root)
            sources[start.task_id] = "existing"
        elif any((r / start.task_id / GAME_FILE).is_file() for r in known):
            sources[start.task_id] = "existing"
        else:
            write_game(start.sim_task, rebuild_root / start.task_id)
            sources[start.task_id] = "rebuilt"
    if "rebuilt" in sources.values():
        roots.append(rebuild_root)
    return RowGames([str(r) for r in roots + [k for k in known if k not in roots]], sources)


# --- command line ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildGamesConfig:
    """Build ALFWorld games offline: generated from the shipped floor plans, or rebuilt from RL rows."""

    out_dir: str = option(help="games root: <out-dir>/<split>/<task folder>/<trial>/game.tw-pddl")
    num_games: int = option(0, "games to generate over the six task types (0 with --from-rows: none)")
    seed: int = option(0, "seed of the scenes and of the floor-plan split")
    eval_fraction: float = option(0.1, "share of the games in each of eval_in_distribution and eval_out_of_distribution")
    workers: int = option(2, "processes (one ALFWorld env each, to check each game with the expert)")
    from_rows: str = option("", "rebuild the game of every row of this RL row file (the paper's alfworld_rl.jsonl "
                                "or rl_*.jsonl) under --out-dir instead")
    download: bool = option(False, "fetch ALFWorld's real games instead (alfworld-download into --out-dir; needs the "
                                   "internet), then use them with ALFWORLD_DATA=<out-dir>")

    def __post_init__(self) -> None:
        if self.num_games < 0 or self.workers < 1 or not 0 <= self.eval_fraction < 0.5:
            raise ConfigError("need --num-games >= 0, --workers >= 1 and 0 <= --eval-fraction < 0.5")
        if not self.num_games and not self.from_rows and not self.download:
            raise ConfigError("give --num-games N (generate), --from-rows ROWS (rebuild) or --download")


def download(out_dir: str | Path, timeout_s: float = 3600.0) -> Path:
    """ALFWorld's own games via ``alfworld-download`` (3,553 train / 140 valid_seen / 134 valid_unseen); a
    ConfigError that says what to do when it fails (offline: build the games here instead)."""
    beside = Path(sys.executable).parent / "alfworld-download"  # the venv's, also when it is not on PATH
    exe = str(beside) if beside.is_file() else shutil.which("alfworld-download")
    if exe is None:
        raise ConfigError("alfworld-download is not installed: pip install -e '.[envs]'", key="--download")
    env = {**os.environ, "ALFWORLD_DATA": str(Path(out_dir).resolve())}
    try:
        done = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        done = None
    target = Path(out_dir) / "json_2.1.1"
    if done is None or done.returncode != 0 or not target.is_dir():
        lines = [] if done is None else (done.stderr or done.stdout).strip().splitlines()
        why = "timed out" if done is None else (lines[-1][:200] if lines else f"exit status {done.returncode}")
        raise ConfigError(f"alfworld-download failed ({why}); without the internet, build the games offline: "
                          "python alfworld/build_games.py --out-dir runs/alfworld_games --num-games 300, or rebuild "
                          "the paper's rows with --from-rows alfworld_rl.jsonl", key="--download")
    return target


def rebuild_from_rows(rows_path: str, out_dir: str | Path) -> dict[str, int]:
    """The game of every row under ``out_dir`` (rows are read, and refused with file:line, by the env's spec)."""

    spec = get_env("alfworld")
    starts = read_jsonl(rows_path, validate=lambda row: spec.load_row(row, need_sim=True)).rows
    notes = 0
    for start in starts:
        write_game(start.sim_task, Path(out_dir) / start.task_id)
        notes += bool(start.sim_task.notes)
    return {"games": len(starts), "with_objects_added": notes}


def main(argv: list[str] | None = None, prog: str = "alfworld/build_games.py") -> int:
    parsed = ConfigCLI(BuildGamesConfig, prog=prog, description=BuildGamesConfig.__doc__,
                       key_values=False).parse_or_report(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        return 2
    config = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        check_output_dir(config.out_dir, "--out-dir")
        if config.download:
            print(f"ALFWorld's games -> {download(config.out_dir)}; use them with ALFWORLD_DATA={config.out_dir}")
        if config.from_rows:
            done = rebuild_from_rows(config.from_rows, config.out_dir)
            print(f"rebuilt {done['games']} games from {config.from_rows} -> {config.out_dir} "
                  f"({done['with_objects_added']} with objects the rows did not locate)")
        if config.num_games:
            report = generate_games(config.out_dir, config.num_games, seed=config.seed,
                                    eval_fraction=config.eval_fraction, workers=config.workers)
            print(f"generated {sum(report.games.values())} games {report.games} in {report.seconds:.0f} s -> "
                  f"{config.out_dir}; the expert lost {report.dropped} of {report.tried} scenes tried (dropped, "
                  f"as alfworld-generate drops unsolvable games); per task type: {report.per_task_type}")
            if report.failures:
                print(f"no solvable scene for: {', '.join(report.failures)}", file=sys.stderr)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
