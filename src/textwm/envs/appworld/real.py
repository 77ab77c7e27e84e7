"""AppWorld's real apps behind the env protocol: one ``apps_runner.py`` subprocess per session.

A task id is an RL row's ``task_id`` (from the session's ``--rows`` files): reset seeds that row's world
(:mod:`textwm.envs.appworld.seed`) into fresh app DBs, with the clock frozen on the row's date. Or it is
an official AppWorld task id with its data at ``$APPWORLD_ROOT/data/tasks/<id>`` (``appworld download
data``): reset loads it through AppWorld's own ``AppWorld`` class.

An action is one call in the canonical form ``[{"name": "spotify__login", "parameters": {...}}]``; the
observation is the response as the agent sees it: the API's JSON (``json.dumps``, default separators),
or ``{"error": "Response status code is 401:\\n{\\"message\\":\\"Invalid credentials\\"}"}`` with
AppWorld's own text. As in the paper's env server (its released demos),
``supervisor__show_account_passwords`` answers ``[{"app", "username", "password"}, ...]``.

Score and termination of row tasks come from the trajectory (:func:`~textwm.envs.appworld.reward.episode_outcome`,
the same rules as in the simulator); an official task is scored by AppWorld's evaluation once
``supervisor__complete_task`` succeeds (score = share of its tests passed, 1.0 on success).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textwm.config import option
from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs.appworld.apps_python import AppsRunner, find_appworld_python, read_api_specs
from textwm.envs.appworld.calls import canonical
from textwm.envs.appworld.reward import COMPLETE_TASK, SHOW_PASSWORDS, Rules, episode_outcome, rules_of
from textwm.envs.appworld.seed import SeedReport, plan_seed
from textwm.envs.appworld.world import World, world_of_row
from textwm.envs.protocol import BadRequest, EnvFailed, EpisodeOver, ResetResult, StepResult

log = logging.getLogger(__name__)

OFFICIAL_TASKS = Path("data") / "tasks"
#: Default of ``--rows``: RL-row files whose tasks a session can play.
ROWS_ENV = "TEXTWM_APPWORLD_ROWS"
DOWNLOAD_HINT = ("official AppWorld tasks need their data: `appworld download data` (needs internet) with "
                 "$APPWORLD_ROOT set to the folder it should go to, then start the env with that APPWORLD_ROOT "
                 "(or --appworld-root)")


@dataclass(frozen=True)
class AppWorldSessionConfig:
    """Options of an AppWorld env session (env-server flags)."""

    rows: list[str] = option(help="RL-row JSONL files whose task ids are playable (each row's world is seeded; "
                                  f"default: ${ROWS_ENV}, {os.pathsep!r}-separated)",
                             default_factory=lambda: [p for p in os.environ.get(ROWS_ENV, "").split(os.pathsep) if p])
    appworld_python: str = option("", "AppWorld's interpreter (default: $TEXTWM_APPWORLD_PYTHON, then "
                                      "<repo>/.venv-appworld/bin/python)")
    appworld_root: str = option("", "AppWorld's root for official task ids (default: $APPWORLD_ROOT)")
    call_timeout_s: float = option(30.0, "seconds one API call may take before the runner counts as hung")
    reset_timeout_s: float = option(300.0, "seconds a reset may take (the first imports the apps, ~8 s)")

    def __post_init__(self) -> None:
        for name in ("call_timeout_s", "reset_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")


@dataclass(frozen=True)
class RowTask:
    """What a row says about its task: the world (with the answer) and its instruction."""

    task_id: str
    world: World
    instruction: str


def load_row_tasks(paths: list[str]) -> dict[str, RowTask]:
    """task id -> :class:`RowTask` of every row of ``paths``; DataError naming the file, line and field."""
    tasks: dict[str, RowTask] = {}
    for path in paths:
        report = read_jsonl(path, validate=row_task)
        for line, task in zip(report.line_numbers, report.rows):
            if task.task_id in tasks:
                raise DataError(f"task id {task.task_id!r} appears twice", path=path, line=line, field="task_id")
            tasks[task.task_id] = task
    return tasks


def row_task(row: Any) -> RowTask:
    """The :class:`RowTask` of one RL row; DataError naming the field."""
    if not isinstance(row, dict) or not isinstance(row.get("task_id"), str) or not row["task_id"]:
        raise DataError("a row needs a string 'task_id'", field="task_id")
    world = world_of_row(row)
    return RowTask(row["task_id"], world, world.instruction)


def paper_passwords(result: Any, email: str, phone: str) -> Any:
    """AppWorld's ``[{account_name, password}]`` in the paper's form ``[{app, username, password}]``."""
    if not isinstance(result, list):
        return result
    return [{"app": a.get("account_name"), "username": phone if a.get("account_name") == "phone" else email,
             "password": a.get("password")} for a in result]


def render(answer: dict[str, Any]) -> str:
    """The observation text of a runner answer to ``call``."""
    if "error" in answer:
        return json.dumps({"error": answer["error"]})
    return json.dumps(answer["result"])


@dataclass
class _Episode:
    task_id: str
    official: bool
    email: str
    phone: str
    rules: Rules | None
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    score: float = 0.0
    done: bool = False


class AppWorldEnv:
    """AppWorld's apps, one task at a time (an :class:`~textwm.envs.protocol.EnvSession`)."""

    def __init__(self, config: AppWorldSessionConfig | None = None):
        self.config = config or AppWorldSessionConfig()
        self.tasks = load_row_tasks(self.config.rows)
        self.python = find_appworld_python(self.config.appworld_python)
        self.root = self.config.appworld_root or os.environ.get("APPWORLD_ROOT", "")
        self.specs = {s["name"]: s for s in read_api_specs()}
        self._runner: AppsRunner | None = None
        self._episode: _Episode | None = None
        self.last_seed_report: SeedReport | None = None

    # --- the runner ------------------------------------------------------------------------------

    def runner(self) -> AppsRunner:
        if self._runner is None or not self._runner.alive:
            if self._runner is not None:
                log.warning("AppWorld runner died; starting a new one. Its stderr:\n%s", self._runner.stderr_tail())
            env = {**os.environ, "APPWORLD_ROOT": self.root} if self.root else None
            self._runner = AppsRunner(self.python, timeout_s=self.config.call_timeout_s, env=env)
        return self._runner

    def _request(self, op: str, timeout_s: float, **fields: Any) -> dict[str, Any]:
        try:
            return self.runner().request(op, timeout_s=timeout_s, **fields)
        except EnvFailed:
            self._episode = None
            raise

    # --- the protocol ------------------------------------------------------------------------------

    def reset(self, task_id: str, **options: Any) -> ResetResult:
        if options:
            raise BadRequest(f"AppWorld takes no reset options, got {sorted(options)}")
        self._episode = None
        if task_id in self.tasks:
            return self._reset_row(self.tasks[task_id])
        if self.root and (Path(self.root) / OFFICIAL_TASKS / task_id).is_dir():
            return self._reset_official(task_id)
        where = (f"$APPWORLD_ROOT/{OFFICIAL_TASKS}/{task_id} ({Path(self.root) / OFFICIAL_TASKS / task_id}) does "
                 "not exist" if self.root else "APPWORLD_ROOT is not set")
        raise BadRequest(f"unknown AppWorld task id {task_id!r}: not in the session's rows ({len(self.tasks)} task "
                         f"ids from --rows) and {where}; {DOWNLOAD_HINT}")

    def _reset_row(self, task: RowTask) -> ResetResult:
        seed = plan_seed(task.world, task.task_id)
        start = time.perf_counter()
        answer = self._request("reset", self.config.reset_timeout_s, world=seed.payload)
        if "error" in answer:
            raise BadRequest(f"the world of task {task.task_id!r} does not seed: {answer['error']}")
        seed.report.add_runner(answer["result"]["batches"], seed.kinds)
        seconds = time.perf_counter() - start
        self.last_seed_report = seed.report
        log.info("%s (%.2f s)", seed.report.summary(), seconds)
        for name, table in seed.report.tables.items():
            for reason, n in table.skipped.items():
                log.info("  %s: %d skipped: %s", name, n, reason)
        w = task.world
        self._episode = _Episode(task.task_id, False, w.email, w.phone, rules_of(w))
        info = {"task_id": task.task_id, "source": "rows", "reset_s": round(seconds, 3),
                "seed_report": seed.report.to_dict(), "datetime": answer["result"]["datetime"]}
        return ResetResult(observation=task.instruction, task_description=task.instruction, info=info)

    def _reset_official(self, task_id: str) -> ResetResult:
        start = time.perf_counter()
        answer = self._request("official", self.config.reset_timeout_s, task_id=task_id)
        if "error" in answer:
            raise BadRequest(f"official AppWorld task {task_id!r} does not load: {answer['error']}")
        task = answer["result"]
        self._episode = _Episode(task_id, True, task["email"], task["phone_number"], None)
        info = {"task_id": task_id, "source": "official", "reset_s": round(time.perf_counter() - start, 3),
                "datetime": task["datetime"]}
        return ResetResult(observation=task["instruction"], task_description=task["instruction"], info=info)

    def step(self, action: str) -> StepResult:
        episode = self._episode
        if episode is None:
            raise BadRequest("step before reset")
        if episode.done:
            raise EpisodeOver(f"task {episode.task_id!r} is over; reset for the next one")
        name, parameters = parse_action(action)
        answer = self._request("call", self.config.call_timeout_s, name=name, parameters=parameters)
        if name == SHOW_PASSWORDS and "result" in answer:
            answer = {"result": paper_passwords(answer["result"], episode.email, episode.phone)}
        observation = render(answer)
        episode.actions.append(canonical(name, parameters))
        episode.observations.append(observation)
        previous = episode.score
        info: dict[str, Any] = {"error": answer.get("error")}
        if episode.official:
            if name == COMPLETE_TASK and "result" in answer:
                info["evaluation"] = evaluation = self._evaluate()
                episode.score, episode.done = official_score(evaluation), True
        else:
            outcome = episode_outcome(episode.rules, episode.actions, episode.observations)
            episode.score, episode.done = outcome.score, outcome.done
            info["outcome"] = outcome.to_dict()
        return StepResult(observation=observation, reward=episode.score - previous, score=episode.score,
                          done=episode.done, info=info)

    def _evaluate(self) -> dict[str, Any]:
        answer = self._request("evaluate", self.config.reset_timeout_s)
        if "error" in answer:
            raise EnvFailed(f"AppWorld's evaluation failed: {answer['error']}")
        return answer["result"]

    def valid_actions(self) -> list[str]:
        """The public APIs' names (any call of one is a valid action; its parameters are the agent's)."""
        return sorted(name for name, spec in self.specs.items() if spec["app"] != "admin")

    def add_task(self, row: dict[str, Any]) -> None:
        """Make one more RL row playable (the dataset builder's generated worlds)."""
        task = row_task(row)
        self.tasks[task.task_id] = task

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self._episode = None


def parse_action(action: str) -> tuple[str, dict[str, Any]]:
    """``[{"name": ..., "parameters": {...}}]`` (or the bare object) -> (name, parameters); BadRequest if not."""
    try:
        value = json.loads(action)
    except (TypeError, json.JSONDecodeError):
        raise BadRequest(f"an AppWorld action is a JSON call [{{\"name\": ..., \"parameters\": {{...}}}}], "
                         f"got {str(action)[:120]!r}") from None
    call = value[0] if isinstance(value, list) and value else value
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise BadRequest(f"an AppWorld action needs a 'name', got {str(action)[:120]!r}")
    parameters = call.get("parameters", call.get("arguments")) or {}
    if not isinstance(parameters, dict):
        raise BadRequest(f"the parameters of {call['name']!r} must be a JSON object")
    return call["name"], parameters


#: One listing call per app for :func:`smoke_calls` (the app's main records, first page).
LISTING_CALLS = {"spotify": "spotify__show_song_library", "venmo": "venmo__show_transactions",
                 "simple_note": "simple_note__search_notes", "file_system": "file_system__show_directory"}


def smoke_calls(task: RowTask) -> list[str]:
    """A few real calls every row's world must answer: the passwords, a login per account, a listing per app."""
    calls = [canonical(SHOW_PASSWORDS)]
    for account in task.world.accounts:
        calls.append(canonical(f"{account.app}__login", {"username": account.username, "password": account.password}))
        if account.app in LISTING_CALLS:
            calls.append(canonical(LISTING_CALLS[account.app]))
    return calls


def official_score(evaluation: dict[str, Any]) -> float:
    """1.0 when AppWorld's evaluation succeeds, else the share of its tests that passed."""
    if evaluation.get("success"):
        return 1.0
    passes, failures = len(evaluation.get("passes", [])), len(evaluation.get("failures", []))
    return passes / (passes + failures) if passes + failures else 0.0
