"""ScienceWorld behind the env protocol.

Task ids are the paper's ``<task>_v<variation>`` (``boil_v11``), optionally with ``_gen<k>`` suffixes
for parallel copies of the same task. The default simplification is ``easy`` (teleport, open doors,
self-watering pots, no electrical actions), as in the paper's data. Steps take the fast path
(``server.step`` plus score, ~4 ms) unless valid actions are asked for (~40-130 ms, the env
enumerates them). The step limit is raised so gold runs finish (the package default, 100, cuts
long ones).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from textwm._optional import require
from textwm.config import option
from textwm.envs.protocol import BadRequest, EnvError, EnvFailed, ResetResult, StepResult

log = logging.getLogger(__name__)

#: Moves before the env ends an episode (gold runs of the longest tasks need ~150).
DEFAULT_STEP_LIMIT = 10_000
DEFAULT_SIMPLIFICATION = "easy"
TASK_ID_RE = re.compile(r"^(?P<task>[a-z0-9-]+)_v(?P<variation>\d+)(?:_gen\d+)*$")
#: JVM options for many concurrent envs (~360 MB each instead of 0.6-1.3 GB), unless JAVA_TOOL_OPTIONS is set.
#: G1 rather than the serial collector (~290 MB): with the serial one, a build of the same jobs gave three
#: different datasets in six runs on a loaded machine; with G1 and the options below, sixteen runs gave one.
JAVA_OPTIONS = "-Xmx384m -XX:+UseG1GC"
#: Always on the JVM's command line: its compiler and GC threads started at once, not as the load comes. The
#: order in which ScienceWorld lists a room's objects follows identity hashes, whose per-thread seeds depend on
#: how many threads started before; with threads started by load, that order varied from run to run.
REPRODUCIBLE_JVM_OPTIONS = ("-XX:-UseDynamicNumberOfCompilerThreads", "-XX:-UseDynamicNumberOfGCThreads")
ROOMS = ("hallway", "kitchen", "outside", "foundry", "greenhouse", "workshop", "bedroom", "living room",
         "art studio", "bathroom")
SPLITS = ("train", "dev", "test")


def _scienceworld():
    module = require("scienceworld", extra="envs")
    logging.getLogger("scienceworld").setLevel(logging.WARNING)  # one INFO line per task load otherwise
    return module


@dataclass(frozen=True)
class TaskRef:
    task: str
    variation: int

    @property
    def task_id(self) -> str:
        return f"{self.task}_v{self.variation}"


def parse_task_id(task_id: str) -> TaskRef:
    """``boil_v11`` or ``boil_v11_gen3`` -> (``boil``, 11); names and ranges are checked by :func:`check_task`."""
    m = TASK_ID_RE.match(task_id)
    if not m:
        raise BadRequest(f"task id {task_id!r} is not '<task>_v<variation>' (e.g. boil_v11)")
    return TaskRef(m["task"], int(m["variation"]))


CATALOG_FILE = Path(__file__).with_name("catalog.json")


@lru_cache(maxsize=1)
def task_catalog() -> dict[str, dict[str, list[int]]]:
    """``{task: {"train": [...], "dev": [...], "test": [...]}}`` from ScienceWorld's own split lists.

    Read from the bundled ``catalog.json`` when it was written for the installed ScienceWorld
    version (asking the env costs a JVM and ~5 s), else from a live env.
    """
    installed = importlib.metadata.version("scienceworld")
    if CATALOG_FILE.exists():
        bundled = json.loads(CATALOG_FILE.read_text())
        if bundled.get("scienceworld_version") == installed:
            return bundled["tasks"]
        log.warning("catalog.json is for ScienceWorld %s, %s is installed: asking the env",
                    bundled.get("scienceworld_version"), installed)
    return live_task_catalog()


def live_task_catalog() -> dict[str, dict[str, list[int]]]:
    env = new_env()
    try:
        catalog = {}
        for task in env.get_task_names():
            env.load(task, 0, "")
            catalog[task] = {"train": list(env.get_variations_train()), "dev": list(env.get_variations_dev()),
                             "test": list(env.get_variations_test())}
        return catalog
    finally:
        env.close()


def check_task(ref: TaskRef) -> None:
    catalog = task_catalog()
    if ref.task not in catalog:
        raise BadRequest(f"unknown ScienceWorld task {ref.task!r}; known: {', '.join(sorted(catalog))}")
    variations = {v for vs in catalog[ref.task].values() for v in vs}
    if ref.variation not in variations:
        raise BadRequest(f"{ref.task} has variations 0..{max(variations)}; got {ref.variation}")


_LAUNCH_LOCK = threading.Lock()


def new_env(step_limit: int = DEFAULT_STEP_LIMIT) -> Any:
    """A ScienceWorld env in its own JVM (with the memory-lean JVM options unless set by the user, and the
    reproducible ones always).

    The JVM's py4j gateway is started with an auth token (``launch_gateway(enable_auth=True)``), so no
    other local process can drive it. ScienceWorld builds its gateway inside its constructor, so the three
    py4j names it uses are swapped for token-carrying ones while it runs (under a lock).
    """
    os.environ.setdefault("JAVA_TOOL_OPTIONS", JAVA_OPTIONS)
    sw = _scienceworld()
    from py4j import java_gateway as jg  # optional extra (envs): py4j comes with scienceworld

    module = sys.modules[sw.ScienceWorldEnv.__module__]
    token: dict[str, str] = {}

    def launch_gateway(**kwargs: Any) -> tuple[int, Any]:
        kwargs["javaopts"] = [*REPRODUCIBLE_JVM_OPTIONS, *kwargs.get("javaopts", ())]
        port, token["auth"], proc = jg.launch_gateway(enable_auth=True, **kwargs)
        return port, proc

    replacements = {"launch_gateway": launch_gateway,
                    "GatewayParameters": lambda **kw: jg.GatewayParameters(auth_token=token["auth"], **kw),
                    "CallbackServerParameters": lambda **kw: jg.CallbackServerParameters(auth_token=token["auth"],
                                                                                         **kw)}
    with _LAUNCH_LOCK:
        originals = {name: getattr(module, name) for name in replacements}
        try:
            for name, value in replacements.items():
                setattr(module, name, value)
            return sw.ScienceWorldEnv("", envStepLimit=step_limit)
        finally:
            for name, value in originals.items():
                setattr(module, name, value)


@dataclass(frozen=True)
class SciWorldSessionConfig:
    """Options of every ScienceWorld session (the env server's ``--step-limit`` and ``--simplification``)."""

    step_limit: int = option(DEFAULT_STEP_LIMIT, "moves before an episode ends (the package default, 100, cuts "
                                                 "long gold runs)")
    simplification: str = option(DEFAULT_SIMPLIFICATION, "simplifications for resets that name none (easy: "
                                                         "teleport, open doors, self-watering pots, no electrical "
                                                         "actions)")

    def __post_init__(self) -> None:
        if self.step_limit < 1:
            raise ValueError(f"step_limit must be >= 1, got {self.step_limit}")


def _py4j_error() -> type[BaseException]:
    from py4j.protocol import Py4JError  # optional extra (envs): py4j comes with scienceworld

    return Py4JError


def _java_error() -> type[BaseException]:
    """An exception thrown inside the JVM (the JVM is alive): the input's fault, not a lost env."""
    from py4j.protocol import Py4JJavaError  # optional extra (envs): py4j comes with scienceworld

    return Py4JJavaError


class SciWorldEnv:
    """One ScienceWorld env (one JVM), playing one task at a time: the env's :class:`~textwm.envs.protocol.EnvSession`.

    A JVM failure is an :class:`~textwm.envs.protocol.EnvFailed` (the session is lost, not the worker).
    """

    def __init__(self, *, step_limit: int = DEFAULT_STEP_LIMIT, simplification: str = DEFAULT_SIMPLIFICATION):
        self.step_limit = step_limit
        self.simplification = simplification
        self._env = new_env(step_limit)
        self.ref: TaskRef | None = None
        self._last_score = 0
        self._done = False

    def reset(self, task_id: str, *, simplification: str | None = None, gold_path: bool = False) -> ResetResult:
        ref = parse_task_id(task_id)
        check_task(ref)
        simp = self.simplification if simplification is None else simplification
        try:
            self._env.load(ref.task, ref.variation, simp, generateGoldPath=gold_path)
            observation, info = self._env.reset()
        except ValueError as exc:  # an unknown simplification (ScienceWorld's message lists them)
            raise BadRequest(str(exc)) from None
        except _py4j_error() as exc:
            raise EnvFailed(f"{type(exc).__name__}: {exc}") from exc
        self.ref, self._last_score, self._done = ref, 0, False
        return ResetResult(observation=observation, task_description=self._env.get_task_description(),
                           info={"task_id": ref.task_id, "simplification": simp, "inventory": info.get("inv", "")})

    def step(self, action: str, *, with_valid_actions: bool = False) -> StepResult:
        """One action on the fast path; ``with_valid_actions`` adds the env's list (~40-130 ms more)."""
        if self.ref is None:
            raise EnvError("reset() the env before stepping it")
        if not isinstance(action, str):
            raise EnvError(f"action must be a string, got {type(action).__name__}")
        if self._done:
            raise EnvError(f"episode of {self.ref.task_id} is over; reset() to play again")
        server = self._env.server
        try:
            observation = server.step(action)
            score = round(100 * server.getScore())
            moves = self._env.get_num_moves()
            completed = bool(server.getCompleted())
        except _java_error() as exc:  # ScienceWorld threw on this action; the session goes on
            raise BadRequest(f"ScienceWorld could not take the action {action[:80]!r}: "
                             f"{str(exc.java_exception)[:200]}") from None
        except _py4j_error() as exc:
            raise EnvFailed(f"{type(exc).__name__}: {exc}") from exc
        done = completed or moves > self.step_limit or score < 0
        reward = score - self._last_score
        self._last_score, self._done = score, done
        info: dict[str, Any] = {"moves": moves}
        if with_valid_actions:
            info["valid_actions"] = self.valid_actions()
        return StepResult(observation=observation, reward=reward, score=score, done=done, info=info)

    def valid_actions(self) -> list[str]:
        try:
            return sorted(self._env.get_valid_action_object_combinations())
        except _py4j_error() as exc:
            raise EnvFailed(f"{type(exc).__name__}: {exc}") from exc

    def gold_actions(self) -> list[str]:
        """Gold action sequence of the loaded task (reset with ``gold_path=True``)."""
        return list(self._env.get_gold_action_sequence())

    def look(self) -> str:
        return self._env.look()

    def object_names(self) -> list[str]:
        """One name the parser accepts for each object in reach (here and in the inventory), rooms included:
        ``["agent", "axe", "common toad", ...]``, where the listing says "a frog egg" (free: no tick)."""
        try:
            return sorted(self._env.get_possible_objects())
        except _py4j_error() as exc:
            raise EnvFailed(f"{type(exc).__name__}: {exc}") from exc

    def inventory(self) -> str:
        return self._env.inventory()

    def close(self) -> None:
        # py4j logs the JVM's normal shutdown as an exception with a traceback at INFO; keep it out of our logs.
        py4j_log = logging.getLogger("py4j")
        level = py4j_log.level
        if not log.isEnabledFor(logging.DEBUG):
            py4j_log.setLevel(logging.WARNING)
        try:
            self._env.close()
        except Exception as exc:  # noqa: BLE001 -- a dead JVM cannot be closed twice; say so and go on
            log.warning("closing a ScienceWorld env failed: %s", exc)
        finally:
            py4j_log.setLevel(level)
