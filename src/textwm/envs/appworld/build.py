"""AppWorld's dataset builder: real tool responses -> world-model transitions, RL task rows and SFT demos.

Two sources of real responses, one row format (system / ``State: ...\\n\\nAction: <call>`` / response, the
text of :mod:`~textwm.envs.appworld.wm_prompt`, so training rows and simulator queries agree):

* ``--demos``: the paper's SFT demos (``appworld_sft_gpt_agent.jsonl``), whose responses came from real
  AppWorld. Their world is the accounts the demo's own passwords response shows (no records);
* the real apps (:class:`~textwm.envs.appworld.real.AppWorldEnv`) on worlds seeded from RL rows (``--rows``,
  e.g. the paper's 34) or generated offline (``--generate N``, :mod:`~textwm.envs.appworld.generate`). Each
  world is played by the expert when its task is a generated question (its run is the SFT demo when it
  answers right), then explored: passwords, a wrong and the right login per app, a call before login,
  up to 4 listing APIs of the app, lookups by ids the listings returned, a missing argument, an unknown API
  (``--explore-steps`` x ``--explore-episodes`` calls in all, one exploration per world).

Every transition keeps what the local responder says to the same call from the same state
(``responder``; None where it defers to the WM), so each dataset also measures the responder.
Splits: a paper scenario (``692c77d`` of ``692c77d_2``) or a generated world lies in one split, by hash.
"""

from __future__ import annotations

import json
import logging
import os
import random
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textwm.config import option
from textwm.data.jsonl import read_jsonl
from textwm.data.schema import parse_messages
from textwm.data.wm_message import wm_user_message
from textwm.envs.appworld import agent, expert, tools
from textwm.envs.appworld.apps_python import (
    ENV_VAR,
    REPO_VENV,
    create_appworld_venv,
    find_appworld_python,
    repo_root,
)
from textwm.envs.appworld.calls import canonical
from textwm.envs.appworld.demos import read_demo, world_of_demo
from textwm.envs.appworld.generate import generate_rows
from textwm.envs.appworld.real import AppWorldEnv, AppWorldSessionConfig
from textwm.envs.appworld.responder import respond, track_login
from textwm.envs.appworld.wm_prompt import LAYOUTS, wm_query
from textwm.envs.appworld.world import World, world_of_row
from textwm.envs.build import BuildConfig, Job, JobResult, job_seed

SPLITS_BY_HASH = ("test", "dev")  # hash % 10 == 0 -> test, == 1 -> dev, else train
EXPERT_STEPS = 40
#: Worlds the demo generates; the per-kind caps keep a few of each (the rest are never played).
DEMO_WORLDS = 400


@dataclass(frozen=True)
class AppWorldBuildConfig(BuildConfig):
    """Build the AppWorld world-model dataset from real tool responses (the paper's demos, the real apps).

    ``--train/dev/test-variations N``: at most N tasks per family (AppWorld scenario, or generated question kind)
    in each split; ``--explore-steps`` x ``--explore-episodes``: calls of the explorer per world."""

    demos: str = option("", "the paper's SFT demos (appworld_sft_gpt_agent.jsonl): their real responses")
    rows: str = option("", "RL task rows whose worlds are seeded into the real apps (e.g. appworld_rl_split_clean.jsonl)")
    generate: int = option(0, "worlds generated offline and played in the real apps (with --rows: in addition)")
    appworld_python: str = option("", "AppWorld's interpreter (default: $TEXTWM_APPWORLD_PYTHON, .venv-appworld)")
    prompt_style: str = option("ours", "WM prompt layout of the rows: ours or paper (the paper's query, byte for "
                                       "byte; query it with APPWORLD_WM_PROMPT=paper)", choices=LAYOUTS)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompt_style not in LAYOUTS:
            raise ValueError(f"--prompt-style must be one of {', '.join(LAYOUTS)}, got {self.prompt_style!r}")
        if not (self.demos or self.rows or self.generate):
            raise ValueError("nothing to build from: give --demos FILE, --rows FILE and/or --generate N")
        for flag, path in (("--demos", self.demos), ("--rows", self.rows)):
            if path and not Path(path).is_file():
                raise ValueError(f"{flag} {path!r} is not a file")


def demo_layout(prompt_style: str) -> str:
    """The demo's ``--prompt-style`` as AppWorld's layout: ``paper``, else ours."""
    return "paper" if prompt_style == "paper" else "ours"


def split_of(task_id: str, family: str) -> str:
    key = family if len(family) == 7 and all(c in "0123456789abcdef" for c in family) else task_id
    h = zlib.crc32(key.encode()) % 10
    return SPLITS_BY_HASH[h] if h < len(SPLITS_BY_HASH) else "train"


def transition(world: World, logged_in: list[str], history: list[tuple[str, str]], action: str, response: str,
               job: Job, step: int, source: str, *, layout: str = "ours",
               start_messages: list[dict[str, Any]] | tuple = ()) -> dict[str, Any]:
    name, arguments = agent.action_call(action)
    q = wm_query(world, logged_in, history, action, layout=layout, start_messages=start_messages)
    return {"messages": [{"role": "system", "content": q.system_prompt},
                         {"role": "user", "content": wm_user_message(q.state, q.action)},
                         {"role": "assistant", "content": response}],
            "task_id": job.task_id, "task": job.family, "split": job.split, "step": step, "source": source,
            "tool": name, "responder": respond(world, logged_in, name, arguments)}


class Recorder:
    """One played episode: its transitions, the apps logged in to, the history the WM prompt shows."""

    def __init__(self, world: World, job: Job, *, layout: str = "ours", start_messages: Any = ()):
        self.world, self.job, self.layout = world, job, layout
        self.start_messages = [dict(m) for m in start_messages]
        self.logged_in: list[str] = []
        self.history: list[tuple[str, str]] = []
        self.rows: list[dict[str, Any]] = []

    def record(self, action: str, response: str, source: str) -> None:
        self.rows.append(transition(self.world, self.logged_in, self.history, action, response, self.job,
                                    len(self.history), source, layout=self.layout, start_messages=self.start_messages))
        track_login(self.logged_in, agent.action_call(action)[0], response)
        self.history.append((action, response))


def _call(name: str, **parameters: Any) -> str:
    return canonical(name, parameters)


def exploration(world: World, rng: random.Random) -> list[str]:
    """The explorer's plan before any response (what follows from responses is added by :func:`lookups`)."""
    plan = [_call("supervisor__show_account_passwords")]
    for account in world.accounts:
        app = account.app
        listings = [t for t in tools.tools_of([app]) if t.method == "GET" and t.requires_access_token
                    and not any(p.required for p in t.params)]
        if listings:
            plan.append(_call(rng.choice(listings).name))  # before login: the 401
        plan += [_call(f"{app}__login", username=account.username, password=account.password + "x"),
                 _call(f"{app}__login", username=account.username, password=account.password)]
        for t in rng.sample(listings, min(len(listings), 4)):
            plan.append(_call(t.name, page_index=0, page_limit=20))
        needing = [t for t in tools.tools_of([app]) if any(p.required for p in t.params) and t.api != "login"]
        if needing:
            plan.append(_call(rng.choice(needing).name))  # missing arguments: the 422
        plan.append(_call(f"{app}__show_everything_{rng.randint(1, 9)}"))  # no such API
    return plan


def lookups(app_tools: dict[str, list[tools.Tool]], response: str, rng: random.Random, limit: int = 2) -> list[str]:
    """Calls of by-id APIs for ids a listing response returned (``song_id`` -> ``spotify__show_song``)."""
    try:
        value = json.loads(response)
    except json.JSONDecodeError:
        return []
    items = value if isinstance(value, list) else []
    out = []
    for item in rng.sample(items, min(limit, len(items))):
        if not isinstance(item, dict):
            continue
        for key, v in item.items():
            for t in app_tools.get(key, []):
                out.append(_call(t.name, **{key: v}))
                break
    return out[:limit]


class AppWorldBuilder:
    """:class:`~textwm.envs.build.DatasetBuilder` of AppWorld."""

    config_class = AppWorldBuildConfig
    #: scripts/demo.sh --env appworld: ~1,300 tokens a row (the world's records and the API in the prompt).
    demo_defaults: ClassVar[dict[str, int]] = {"train_steps": 80, "batch_size": 4, "eval_rows": 40, "agent_turns": 16}
    split_note = ("Splits by hash: every task of one AppWorld scenario, and every generated world, lies in one split "
                  "(10% test, 10% dev); the paper's demos keep their scenario's split.")

    def plan(self, config: BuildConfig) -> list[Job]:
        jobs = []
        if config.demos:
            for i, row in enumerate(read_jsonl(config.demos).rows):
                task_id, family = str(row.get("task_id")), str(row.get("task_id")).rsplit("_", 1)[0]
                jobs.append(Job(f"{task_id}#demo{i}", family, split_of(task_id, family), job_seed(config.seed, str(i)),
                                {"demo": row}))
        rows = read_jsonl(config.rows).rows if config.rows else []
        rows += generate_rows(config.generate, config.seed)
        for row in rows:
            task_id = row["task_id"]
            family = task_id.rsplit("_", 1)[0]
            jobs.append(Job(task_id, family, split_of(task_id, family), job_seed(config.seed, task_id), {"row": row}))
        wanted = set(config.tasks or ())
        kept, per = [], Counter()
        for j in jobs:  # at most --<split>-variations tasks per family and split
            if (not wanted or j.family in wanted) and per[j.split, j.family] < config.variations[j.split]:
                per[j.split, j.family] += 1
                kept.append(j)
        if not kept:
            raise ValueError("no AppWorld task left after --tasks and the --*-variations caps")
        return kept

    def demo_config(self, out_dir: Path, demo: Any) -> AppWorldBuildConfig:
        """The demo's build: generated worlds played in the real apps (AppWorld's interpreter is made first if
        there is none: ~45 s), ``train_variations`` per question kind for train and ``test_variations`` for test."""
        try:
            find_appworld_python()
        except FileNotFoundError as exc:
            if os.environ.get(ENV_VAR):  # the user named one: a wrong path is theirs to fix
                raise
            logging.getLogger(__name__).warning("%s; making %s now", exc, repo_root() / REPO_VENV)
            create_appworld_venv(repo_root() / REPO_VENV)
        return AppWorldBuildConfig(out_dir=str(out_dir), generate=DEMO_WORLDS, tasks=tuple(demo.tasks) or None,
                                   train_variations=demo.train_variations, dev_variations=0,
                                   test_variations=demo.test_variations, explore_episodes=1 if demo.explore_steps else 0,
                                   explore_steps=demo.explore_steps, workers=demo.workers, seed=demo.seed,
                                   max_turns=demo.agent_turns, prompt_style=demo_layout(demo.prompt_style))

    def open_env(self) -> Any:
        return _LazyEnv()

    def run_job(self, env: _LazyEnv, job: Job, config: BuildConfig) -> JobResult:
        if "demo" in job.meta:
            return self._demo_job(job, config)
        return self._world_job(env.get(job, config), job, config)

    def _demo_job(self, job: Job, config: BuildConfig) -> JobResult:
        demo = read_demo(job.meta["demo"])
        rec = Recorder(world_of_demo(demo), job, layout=getattr(config, "prompt_style", "ours"),
                       start_messages=demo.messages[:2])
        for step in demo.steps:
            rec.record(step.action, step.response, "paper_demo")
        return JobResult(job=job, rows=rec.rows, rl=None, sft=None, gold_score=None)

    def _world_job(self, env: Any, job: Job, config: BuildConfig) -> JobResult:
        row = job.meta["row"]
        world = world_of_row(row)
        start = [dict(m) for m in parse_messages(row.get("messages"))][:2]
        layout = getattr(config, "prompt_style", "ours")
        rows, sft, gold = [], None, None
        if world.instruction in expert.TASKS:
            rec, score = Recorder(world, job, layout=layout, start_messages=start), 0.0
            env.reset(job.task_id)
            messages = [dict(m) for m in json.loads(row["messages"])]
            for _ in range(EXPERT_STEPS):
                action = expert.next_call(world.instruction, rec.history)
                if action is None:
                    break
                result = env.step(action)
                rec.record(action, result.observation, "real_expert")
                messages += [{"role": "assistant", "content": action},
                             {"role": "user", "content": agent.tool_response_message(result.observation)}]
                score = result.score
                if result.done:
                    break
            rows, gold = rec.rows, score
            if score >= 1.0:
                sft = {"messages": messages[:-1], "task_id": job.task_id}
        rows += self._explore(env, world, job, config, start)
        if layout != "ours":     # the simulator then queries as these rows are written
            row = {**row, "wm_prompt": layout}
        return JobResult(job=job, rows=rows, rl=row, sft=sft, gold_score=gold)

    def _explore(self, env: Any, world: World, job: Job, config: BuildConfig,
                 start_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rng = random.Random(job.seed)
        by_id: dict[str, list[tools.Tool]] = {}
        for t in tools.tools_of([a.app for a in world.accounts]):
            required = [p for p in t.params if p.required]
            if t.method == "GET" and len(required) == 1 and required[0].name.endswith("_id"):
                by_id.setdefault(required[0].name, []).append(t)
        rec = Recorder(world, job, layout=getattr(config, "prompt_style", "ours"), start_messages=start_messages)
        env.reset(job.task_id)
        queue = exploration(world, rng)
        budget = max(config.explore_steps, 0) * max(config.explore_episodes, 0)
        while queue and len(rec.history) < budget:
            action = queue.pop(0)
            result = env.step(action)
            rec.record(action, result.observation, "real_explore")
            queue[:0] = lookups(by_id, result.observation, rng)
        return rec.rows


class _LazyEnv:
    """The real apps, started on the first job that needs them (a demo-only build never starts AppWorld)."""

    def __init__(self) -> None:
        self.env: Any = None

    def get(self, job: Job, config: BuildConfig) -> Any:
        if self.env is None:
            self.env = AppWorldEnv(AppWorldSessionConfig(rows=[], appworld_python=config.appworld_python))
        self.env.add_task(job.meta["row"])
        return self.env
