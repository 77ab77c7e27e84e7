"""ALFWorld's dataset-builder hooks (the plumbing is :mod:`textwm.envs.build`).

Games come from ``alfworld/build_games.py`` (``--games-dir``); their splits are the generator's, by floor
plan: ``train`` -> train, ``eval_in_distribution`` (seen floor plans) -> dev, ``eval_out_of_distribution``
(unseen floor plans) -> test, so no game and no unseen floor plan is shared across splits.

Per game: the handcoded expert's episode, and exploratory episodes (each step the expert's action, a
sampled admissible command, or an invalid one — a command the game does not admit, so the world model
learns "Nothing happens."). Every step is one chat row: system = the scene in the paper's
``wm_system_prompt`` format, user = ``State: <tracked state + recent steps>\\n\\nAction: <action>``
(:func:`~textwm.envs.alfworld.sim.wm_query_of`, the simulator's own query), assistant = the real
observation. ``--prompt-style paper`` writes the paper's query instead (:mod:`~textwm.envs.alfworld.paper_prompt`:
the system prompt rebuilt from the scene and the agent's conversation in the real game, its admissible commands
included; the state that conversation as JSON), the layout the simulator queries with ``ALFWORLD_WM_PROMPT=paper``.
The expert episode also gives the RL task row (the paper's columns + ``task_id`` and
``sim_task``) and, when it wins, an SFT demo (``Action: <command>`` turns).

:func:`paper_main` is alfworld/build_dataset.py and build_sft_expert.py: our flags, plus the paper's
``--out FILE`` form (one split's rows to one file).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from textwm.cli_checks import take_flags
from textwm.config import option
from textwm.data.wm_message import wm_user_message
from textwm.envs.alfworld import agent, paper_prompt
from textwm.envs.alfworld.env import AlfWorldEnv, AlfWorldSessionConfig, games_roots
from textwm.envs.alfworld.gamebank import EXPERT_STEPS, generate_games
from textwm.envs.alfworld.games import GAME_FILE, read_scene
from textwm.envs.alfworld.responder import respond
from textwm.envs.alfworld.scene import Scene
from textwm.envs.alfworld.sim import LAYOUTS, wm_query_of
from textwm.envs.alfworld.tracker import Tracker
from textwm.envs.build import BuildConfig, Job, JobResult, job_seed, main

#: Game folders' splits -> the dataset's split names.
SPLIT_OF = {"train": "train", "eval_in_distribution": "dev", "eval_out_of_distribution": "test"}
#: ``random.Random(7).shuffle`` of the sorted game files: the paper's alfworld/build_dataset.py main() and
#: build_sft_expert.py main() (``--shuffle``; the SFT builder always shuffles).
PAPER_SHUFFLE_SEED = 7
#: Shares of the exploratory steps: the expert's action, a sampled admissible command, an invalid command.
EXPERT_SHARE, ADMISSIBLE_SHARE = 0.35, 0.45


@dataclass(frozen=True)
class AlfWorldBuildConfig(BuildConfig):
    """Build the ALFWorld world-model dataset (and RL task rows, SFT demos) from real games."""

    games_dir: str = option("", "games root of alfworld/build_games.py (<split>/<task folder>/<trial>/game.tw-pddl)")
    split: str = option("", "build this games split only, from all its games in path order (the paper's "
                            "build_dataset.py --split); '': every split, --{train,dev,test}-variations per task type",
                        choices=("", *SPLIT_OF))
    limit: int = option(-1, "with --split: the first N games only (-1: all)")
    shuffle: bool = option(False, f"with --split: shuffle the games with random.Random({PAPER_SHUFFLE_SEED}) before "
                                  "--limit (the paper's seed)")
    max_steps: int = option(EXPERT_STEPS, "expert actions per game at most (the paper's build_sft_expert.py --max-steps)")
    prompt_style: str = option("scene", "WM prompt layout of the rows: scene (ours) or paper (the paper's query, byte "
                                        "for byte; query it with ALFWORLD_WM_PROMPT=paper)", choices=LAYOUTS)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.games_dir or not Path(self.games_dir).is_dir():
            raise ValueError(f"--games-dir {self.games_dir!r} is not a folder: build games first with "
                             "python alfworld/build_games.py --out-dir runs/alfworld_games --num-games 300 "
                             "(downloaded ALFWorld games, $ALFWORLD_DATA, carry no scene to build the WM prompt from)")
        if self.limit == 0 or self.limit < -1:
            raise ValueError(f"--limit must be -1 (all games) or >= 1, got {self.limit}")
        if (self.limit > 0 or self.shuffle) and not self.split:
            raise ValueError("--limit and --shuffle choose games of one split: add --split "
                             f"{{{','.join(SPLIT_OF)}}} (without --split use --train-variations etc.)")
        if self.max_steps < 1:
            raise ValueError(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.prompt_style not in LAYOUTS:
            raise ValueError(f"--prompt-style must be one of {', '.join(LAYOUTS)}, got {self.prompt_style!r}")


def demo_layout(prompt_style: str) -> str:
    """The demo's ``--prompt-style`` as ALFWorld's layout: ``paper``, else the scene (ours)."""
    return "paper" if prompt_style == "paper" else "scene"


def invalid_action(rng: random.Random, scene: Scene, admissible: list[str]) -> str:
    """A command the game does not admit now (wrong place, wrong object, impossible verb)."""
    objects, receptacles = list(scene.objects), [r.name for r in scene.receptacles]
    for _ in range(20):
        obj, rec = rng.choice(objects or ["apple 1"]), rng.choice(receptacles)
        action = rng.choice((f"take {obj} from {rec}", f"move {obj} to {rec}", f"open {rec}", f"close {rec}",
                             f"heat {obj} with {rec}", f"cool {obj} with {rec}", f"clean {obj} with {rec}",
                             f"use {obj}", f"examine {obj}", f"slice {obj} with {rec}"))
        if action not in admissible:
            return action
    return "go to nowhere 1"


def _row(scene: Scene, tracker: Tracker, history: list[tuple[str, str]], action: str, observation: str, job: Job,
         step: int, source: str, episode: str, conversation: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """One transition; ``responder`` is what the local responder says to the same action from the same state
    (None: it defers to the WM), so every dataset measures the responder against the real env. ``conversation``
    (the agent's, before this action): the row is in the paper's layout."""
    if conversation is None:
        q = wm_query_of(tracker, history, action)
        system, user = q.system_prompt, wm_user_message(q.state, q.action)
    else:
        asked = [*conversation, {"role": "assistant", "content": agent.format_reply(action)}]
        system = paper_prompt.system_prompt(scene.wm_system_prompt(), asked, action)
        user = wm_user_message(paper_prompt.user_state(asked), action)
    return {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": user},
                         {"role": "assistant", "content": observation}],
            "task_id": job.task_id, "task": job.family, "split": job.split, "floor_plan": scene.floor_plan,
            "episode": episode, "step": step, "source": source, "responder": respond(tracker, action)}


def start_messages(observation: str, admissible: list[str]) -> list[dict[str, str]]:
    """The agent's conversation before its first action (the system prompt and the welcome turn)."""
    return [{"role": "system", "content": agent.AGENT_SYSTEM_PROMPT},
            {"role": "user", "content": agent.user_turn(observation, admissible)}]


def turn_messages(action: str, observation: str, admissible: list[str]) -> list[dict[str, str]]:
    """One answered turn of the agent's conversation."""
    return [{"role": "assistant", "content": agent.format_reply(action)},
            {"role": "user", "content": agent.user_turn(observation, admissible)}]


def rl_row(scene: Scene, job: Job, game_file: str, first_observation: str, admissible: list[str], expert_first: str,
           max_turns: int) -> dict[str, Any]:
    """An RL task row in the paper's format, plus ``task_id``, ``max_turns`` and ``sim_task``."""
    g = scene.goal
    return {"messages": start_messages(first_observation, admissible),
            "game_file": game_file, "split": job.meta["game_split"], "task_type": g.task_type, "target_obj": g.target,
            "destination": g.destination, "mrecep": g.mrecep, "toggle_target": g.toggle,
            "wm_system_prompt": scene.wm_system_prompt(), "init_admissible": list(admissible),
            "expert_plan": [expert_first], "task_id": job.task_id, "max_turns": max_turns,
            # A JSON string, like the paper's messages: columnar loaders would merge the scenes' dicts.
            "sim_task": json.dumps(scene.to_dict())}


class AlfWorldBuilder:
    """:class:`~textwm.envs.build.DatasetBuilder` of ALFWorld."""

    config_class = AlfWorldBuildConfig
    #: scripts/demo.sh --env alfworld: ~500 tokens a row (the scene in the prompt), so fewer steps than ScienceWorld's.
    demo_defaults: ClassVar[dict[str, int]] = {"train_steps": 200, "eval_rows": 60}
    split_note = ("Splits follow the games' folders: train, dev = eval_in_distribution (seen floor plans), test = "
                  "eval_out_of_distribution (floor plans no other split has), so no game or unseen floor plan is shared.")

    def plan(self, config: BuildConfig) -> list[Job]:
        root = Path(config.games_dir).resolve()
        wanted = set(config.tasks or ())
        if config.split:
            return self._plan_split(config, root, wanted)
        jobs = []
        for game_split, split in SPLIT_OF.items():
            games = sorted(p.parent for p in (root / game_split).glob(f"*/*/{GAME_FILE}"))
            by_type: dict[str, list[Path]] = {}
            for game in games:
                by_type.setdefault(game.parent.name.split("-", 1)[0], []).append(game)
            for task_type, dirs in sorted(by_type.items()):
                if wanted and task_type not in wanted:
                    continue
                for game in dirs[: config.variations[split]]:
                    task_id = game.relative_to(root).as_posix()
                    jobs.append(Job(task_id, task_type, split, job_seed(config.seed, task_id),
                                    {"root": str(root), "game_split": game_split}))
        if not jobs:
            raise ValueError(f"no games under {root}/{{{','.join(SPLIT_OF)}}} (for tasks {sorted(wanted) or 'all'})")
        return jobs

    def _plan_split(self, config: AlfWorldBuildConfig, root: Path, wanted: set[str]) -> list[Job]:
        """``--split``: that split's games sorted by file path, shuffled (``--shuffle``), the first ``--limit``
        (the paper's alfworld/build_dataset.py main(): sorted game files, ``random.Random(7).shuffle``, ``[:limit]``;
        ``--tasks`` filters before the shuffle)."""
        files = sorted(str(p) for p in (root / config.split).glob(f"*/*/{GAME_FILE}"))
        files = [f for f in files if not wanted or Path(f).parent.parent.name.split("-", 1)[0] in wanted]
        if config.shuffle:
            random.Random(PAPER_SHUFFLE_SEED).shuffle(files)
        if config.limit > 0:
            files = files[: config.limit]
        if not files:
            raise ValueError(f"no games under {root / config.split} (for tasks {sorted(wanted) or 'all'})")
        jobs = []
        for f in files:
            game = Path(f).parent
            task_id = game.relative_to(root).as_posix()
            jobs.append(Job(task_id, game.parent.name.split("-", 1)[0], SPLIT_OF[config.split],
                            job_seed(config.seed, task_id), {"root": str(root), "game_split": config.split}))
        return jobs

    def demo_config(self, out_dir: Path, demo: Any) -> AlfWorldBuildConfig:
        """The demo's build: games generated into ``<out_dir>/../games`` (``train_variations`` per task type for
        train, ``test_variations`` per type on unseen floor plans for test), one exploratory episode each."""

        games = Path(out_dir).parent / "games"
        per_type = {"train": demo.train_variations, "eval_in_distribution": 0,
                    "eval_out_of_distribution": demo.test_variations}
        if not games.is_dir():
            generate_games(games, 0, seed=demo.seed, workers=demo.workers, per_type=per_type,
                           task_types=tuple(demo.tasks) or None)
        return AlfWorldBuildConfig(out_dir=str(out_dir), games_dir=str(games), tasks=tuple(demo.tasks) or None,
                                   train_variations=demo.train_variations, dev_variations=0,
                                   test_variations=demo.test_variations, explore_episodes=1 if demo.explore_steps else 0,
                                   explore_steps=demo.explore_steps, workers=demo.workers, seed=demo.seed,
                                   max_turns=demo.agent_turns, prompt_style=demo_layout(demo.prompt_style))

    def open_env(self) -> AlfWorldEnv:
        return AlfWorldEnv(AlfWorldSessionConfig())

    def run_job(self, env: AlfWorldEnv, job: Job, config: BuildConfig) -> JobResult:
        env.roots = games_roots([job.meta["root"]])
        scene = read_scene(Path(job.meta["root"]) / job.task_id)
        if scene is None:
            raise ValueError(f"{job.task_id}: not a game of alfworld/build_games.py (no scene in its traj_data.json)")
        rng = random.Random(job.seed)
        paper = getattr(config, "prompt_style", "scene") == "paper"
        rows: list[dict[str, Any]] = []
        reset = env.reset(job.task_id)
        tracker, history = Tracker.start(scene), []
        info, won = reset.info, False
        demo = start_messages(reset.observation, info["admissible_commands"])
        for step in range(config.max_steps):
            action = info["expert_action"] or "look"
            result = env.step(action)
            rows.append(_row(scene, tracker, history, action, result.observation, job, step, "expert",
                             f"{job.task_id}/expert", demo if paper else None))
            tracker.observe(action, result.observation)
            history.append((action, result.observation))
            demo += turn_messages(action, result.observation, result.info["admissible_commands"])
            info = result.info
            if result.score >= 1.0:
                won = True
                break
        for k in range(config.explore_episodes):
            start = env.reset(job.task_id)
            info = start.info
            tracker, history = Tracker.start(scene), []
            conversation = start_messages(start.observation, info["admissible_commands"])
            for step in range(config.explore_steps):
                u = rng.random()
                if u < EXPERT_SHARE and info["expert_action"]:
                    action, source = info["expert_action"], "explore_expert"
                elif u < EXPERT_SHARE + ADMISSIBLE_SHARE:
                    action, source = rng.choice(info["admissible_commands"]), "explore_admissible"
                else:
                    action, source = invalid_action(rng, scene, info["admissible_commands"]), "explore_invalid"
                result = env.step(action)
                rows.append(_row(scene, tracker, history, action, result.observation, job, step, source,
                                 f"{job.task_id}/explore{k}", conversation if paper else None))
                tracker.observe(action, result.observation)
                history.append((action, result.observation))
                conversation += turn_messages(action, result.observation, result.info["admissible_commands"])
                info = result.info
                if result.done:
                    break
        game_file = str(Path(job.meta["root"]) / job.task_id / GAME_FILE)
        if paper:
            scene = dataclasses.replace(scene, wm_prompt="paper")   # the simulator queries as these rows are written
        rl = rl_row(scene, job, game_file, reset.observation, reset.info["admissible_commands"],
                    reset.info["expert_action"] or "look", config.max_turns)
        sft = {"messages": demo[:-1], "task_id": job.task_id, "game_file": game_file} if won else None
        return JobResult(job=job, rows=rows, rl=rl, sft=sft, gold_score=1.0 if won else 0.0)


#: Printed above ``--help`` of the two paper-named builders.
PAPER_FLAGS_NOTE = ("The paper's flags work too: --out FILE writes only one split's rows to FILE (build_dataset.py: "
                    "the RL rows of --split, which it then requires; build_sft_expert.py: the SFT demos of train, "
                    "shuffled with seed 7), and --split, --limit, --shuffle, --workers, --max-steps are flags of ours "
                    "(below). Games come from --games-dir (alfworld/build_games.py), not $ALFWORLD_DATA.\n")


def paper_argv(argv: list[str], *, kind: str) -> tuple[list[str], Path | None, str]:
    """Our builder's flags for a command line of the paper's alfworld/build_dataset.py (``kind`` "rl") or
    build_sft_expert.py ("sft"), the ``--out`` FILE (None: our ``--out-dir`` form) and the split built.

    The paper's build_sft_expert.py main() always plays train games shuffled with seed 7, so there ``--out`` or
    ``--limit`` without ``--split`` means ``--split train --shuffle``. ValueError naming a flag we cannot take.
    """
    found, rest = take_flags(argv, ("--out", "--out-dir", "--split", "--limit", "--shard-id", "--num-shards"))
    known = SimpleNamespace(**{name: found.get(name) for name in ("out", "out_dir", "split", "limit", "shard_id",
                                                                  "num_shards")})
    if known.shard_id is not None or known.num_shards is not None:
        raise ValueError("--shard-id/--num-shards are the paper's internal worker flags: use --workers N "
                         "(worker processes, one real env each)")
    if known.out is not None and known.out_dir is not None:
        raise ValueError(f"give --out FILE (the paper's: one split's {kind} rows) or --out-dir DIR (ours: every "
                         "file of the build), not both")
    split = known.split or ""
    if kind == "sft" and not split and (known.out is not None or known.limit is not None):
        split = "train"
        if "--shuffle" not in rest and "--no-shuffle" not in rest:
            rest.append("--shuffle")
    if known.out is not None and not split:
        raise ValueError(f"--out {known.out} writes one split: add --split {{{','.join(SPLIT_OF)}}} (as the paper's "
                         "build_dataset.py requires), or use --out-dir DIR for every split")
    flags = list(rest) + (["--split", split] if split else []) + (["--limit", known.limit] if known.limit else [])
    flags += ["--out-dir", known.out_dir] if known.out_dir is not None else []
    return flags, (Path(known.out) if known.out is not None else None), split


def paper_main(argv: list[str] | None = None, *, kind: str, prog: str) -> int:
    """alfworld/build_dataset.py (``kind`` "rl") and build_sft_expert.py ("sft"): with ``--out FILE``, that split
    is built into a scratch folder beside FILE and only its ``{kind}_{split}.jsonl`` is kept, as FILE."""

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(PAPER_FLAGS_NOTE)
    try:
        flags, out, split = paper_argv(argv, kind=kind)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if out is None:
        return main(flags, env="alfworld", prog=prog)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as scratch:
        code = main([*flags, "--out-dir", scratch], env="alfworld", prog=prog)
        if code != 0:
            return code
        os.replace(Path(scratch) / f"{kind}_{SPLIT_OF[split]}.jsonl", out)
    with out.open() as f:
        print(f"wrote {sum(1 for _ in f)} {kind} rows ({split}) to {out}")
    return 0
