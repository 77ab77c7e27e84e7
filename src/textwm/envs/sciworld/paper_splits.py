"""The paper's ScienceWorld RL/test split files, rebuilt from the real env with our agent prompt.

The split rule is the one of ``sciworld/data/create_sciworld_splits.py`` (patronus-ai/mdlm_world_modeling, its
``main()``): per task name, in the env's task order, after loading variation 0 (``easy``), ten rounds each draw one
train variation (ScienceWorld's ``get_random_variation_train``) and one test variation
(``get_random_variation_test``); a draw is kept while its split has fewer than :data:`PER_SPLIT` and it is new
(a test draw also must not be a kept train variation); then variations ``0, 1, ...`` fill whichever split is still
short (train first). The draws come from the JVM, which reseeds on every load, so the split is fixed by the
ScienceWorld version; the paper's ``random.seed(42)`` never reaches them. (Checked with scienceworld 1.2.3: the
train variations of all 30 tasks equal those of the released ``sciworld_rl_split.jsonl``.) Within a task the rows
follow the iteration order of a Python ``set`` of the kept variations, as the paper's loop over its sets did.

A row has the paper's columns and types: ``messages`` (a JSON string: our
:data:`~textwm.envs.sciworld.agent.AGENT_SYSTEM_PROMPT`, then the paper's first user message ``Task: <task
description>\\n\\nYou are in: <start observation>``), ``task_id`` (``<task>_v<variation>``), ``instruction``,
``ground_truth`` (``""``), ``wm_system_prompt`` (the paper's per-task WM prompt: the task, the baked room map and the
room connections, :func:`~textwm.envs.sciworld.paper_prompt.baked_prompt`) and
``max_turns`` (50). No ``sim_task``: GRPO and in-WM evaluation complete such rows through
:mod:`textwm.envs.sim_cache`, as they do the paper's released rows.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import write_jsonl
from textwm.envs.sciworld.agent import AGENT_SYSTEM_PROMPT
from textwm.envs.sciworld.env import DEFAULT_SIMPLIFICATION, SciWorldEnv, new_env
from textwm.envs.sciworld.paper_prompt import baked_prompt
from textwm.envs.sciworld.tasks import bake_task

log = logging.getLogger(__name__)

#: Variations per task in each split (the paper's ``len(train_vars) < 2``).
PER_SPLIT = 2
#: Draw rounds per task (the paper's ``for _ in range(10)``).
DRAW_ROUNDS = 10
#: The paper's ``max_turns`` column.
PAPER_MAX_TURNS = 50
#: The paper's file names: (RL split, test split), per variant.
FILE_NAMES = {"full": ("sciworld_rl_split.jsonl", "sciworld_test_split.jsonl"),
              "lfm": ("sciworld_rl_split_lfm.jsonl", "sciworld_test_split_lfm.jsonl")}


def paper_variations(draw_train: Callable[[], int], draw_test: Callable[[], int], max_variations: int, *,
                     per_split: int = PER_SPLIT, rounds: int = DRAW_ROUNDS) -> tuple[list[int], list[int]]:
    """The (train, test) variations of one task by the paper's rule (module docstring), each in the order of a
    Python set of them (the order the paper's rows came in)."""
    train: set[int] = set()
    test: set[int] = set()
    for _ in range(rounds):
        a = int(draw_train())
        if a not in train and len(train) < per_split:
            train.add(a)
        b = int(draw_test())
        if b not in test and b not in train and len(test) < per_split:
            test.add(b)
    for v in range(max_variations):
        if len(train) >= per_split and len(test) >= per_split:
            break
        if v not in train and v not in test:
            if len(train) < per_split:
                train.add(v)
            elif len(test) < per_split:
                test.add(v)
    return list(train), list(test)


def draw_splits(tasks: Sequence[str] | None = None) -> dict[str, tuple[list[int], list[int]]]:
    """``{task: (train variations, test variations)}`` from a real ScienceWorld env, in the env's task order
    (``tasks``: only these names; ValueError naming unknown ones)."""

    env = new_env()
    try:
        names = list(env.get_task_names())
        unknown = sorted(set(tasks or ()) - set(names))
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s): {', '.join(unknown)} (known: {', '.join(names)})")
        out = {}
        for name in names:
            if tasks and name not in tasks:
                continue
            env.load(name, 0, DEFAULT_SIMPLIFICATION)
            out[name] = paper_variations(env.get_random_variation_train, env.get_random_variation_test,
                                         env.get_max_variations(name))
        return out
    finally:
        env.close()


def first_user_message(task_description: str, observation: str, *, prefix: str = "Task: ") -> str:
    """The paper's first user message of a split row (``Task: ...\\n\\nYou are in: ...``)."""
    return f"{prefix}{task_description}\n\nYou are in: {observation}"


def paper_row(task: Any, *, few_shot: Sequence[dict[str, str]] = (), max_turns: int = PAPER_MAX_TURNS) -> dict:
    """One split row in the paper's format (module docstring) of a baked :class:`~textwm.envs.sciworld.tracker.Task`;
    ``few_shot``: turns between the system prompt and the task's user message (the LFM variant)."""

    prefix = "NEW TASK: " if few_shot else "Task: "
    messages = [{"role": "system", "content": AGENT_SYSTEM_PROMPT}, *few_shot,
                {"role": "user", "content": first_user_message(task.task_description, task.initial_observation,
                                                               prefix=prefix)}]
    return {"messages": json.dumps(messages), "task_id": task.task_id, "instruction": task.task_description,
            "ground_truth": "", "wm_system_prompt": baked_prompt(task),
            "max_turns": max_turns}


def gold_few_shot(env: Any, task_id: str) -> list[dict[str, str]]:
    """A demonstration for the LFM variant: the real gold run of ``task_id`` (the paper's few-shot turns were
    hand-written; ours are what the env answers), as alternating user/assistant turns."""
    start = env.reset(task_id, gold_path=True)
    turns = [{"role": "user", "content": first_user_message(start.task_description, start.observation)}]
    for action in env.gold_actions():
        result = env.step(action)
        turns += [{"role": "assistant", "content": action}, {"role": "user", "content": result.observation}]
        if result.done:
            break
    return turns


#: The LFM variant's demonstration: a train-list variation the split never draws (find-* draw 60 and 79).
FEW_SHOT_TASK = "find-non-living-thing_v0"


def write_splits(out_dir: str | Path, *, variant: str = "full", tasks: Iterable[str] | None = None,
                 max_turns: int = PAPER_MAX_TURNS) -> dict[str, list[dict[str, Any]]]:
    """Draw the splits, bake every variation's start state from the real env, and write the paper's two files of
    ``variant`` into ``out_dir`` (atomically); returns ``{file name: rows}``."""

    if variant not in FILE_NAMES:
        raise ValueError(f"variant must be one of {', '.join(FILE_NAMES)}, got {variant!r}")
    splits = draw_splits(list(tasks) if tasks else None)
    env = SciWorldEnv()
    try:
        few_shot = gold_few_shot(env, FEW_SHOT_TASK) if variant == "lfm" else []
        rows: tuple[list[dict], list[dict]] = ([], [])
        for name, chosen in splits.items():
            for split_rows, variations in zip(rows, chosen, strict=True):
                for v in variations:
                    task = bake_task(env, f"{name}_v{v}")
                    split_rows.append(paper_row(task, few_shot=few_shot, max_turns=max_turns))
            log.info("%s: train %s, test %s", name, *chosen)
    finally:
        env.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for file_name, split_rows in zip(FILE_NAMES[variant], rows, strict=True):
        write_jsonl(out / file_name, split_rows)
        written[file_name] = split_rows
    return written


@dataclass
class PaperSplitsConfig:
    """The paper's ScienceWorld RL and test splits, written from the real env (its split rule and row format)."""

    out_dir: str | None = option(None, "where the two files go (default: the script's own folder)")
    tasks: list[str] | None = option(None, "only these task names (default: all)")
    max_turns: int = option(PAPER_MAX_TURNS, "max_turns column of the rows")


def main(argv: list[str] | None = None, *, variant: str = "full", prog: str | None = None,
         default_out_dir: str = ".") -> int:
    """The command line of ``sciworld/data/create_sciworld_splits[_lfm].py``."""
    parsed = ConfigCLI(PaperSplitsConfig, prog=prog, key_values=False,
                       description=f"Write {' and '.join(FILE_NAMES[variant])} from the real ScienceWorld env (the "
                                   "paper's split rule and row format).").parse_or_report(argv)
    if parsed is None:
        return 2
    c = parsed[0]
    out_dir = c.out_dir or default_out_dir
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        written = write_splits(out_dir, variant=variant, tasks=c.tasks or None, max_turns=c.max_turns)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rl, test = (written[name] for name in FILE_NAMES[variant])
    print(f"Created {len(rl)} RL tasks and {len(test)} test tasks -> {out_dir}")
    return 0
