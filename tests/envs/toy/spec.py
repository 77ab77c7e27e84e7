"""The toy env's spec: everything the env contract asks of an environment, for a game written for the tests.

What adding it took (the contract suite runs it through every generic layer): this package
(``world.py``: the game; this file: rows, simulator rules, reward, sessions, builder hooks) and one
``register(ToySpec())`` line (``tests/envs/conftest.py``). Nothing generic was copied.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.envs.toy import world
from textwm.data.jsonl import DataError
from textwm.data.wm_message import wm_user_message
from textwm.envs.build import SPLITS, BuildConfig, Job, JobResult, job_seed
from textwm.envs.contract import EnvSpec, Outcome, TaskStart, WMQuery

AGENT_PROMPT = "You are in a small house. Reply with one action: look, inventory, go to ROOM, take OBJ, open box, " \
               "put OBJ in box."


@dataclass
class ToyTask:
    """The simulator's start state of a toy task (baked from the real game)."""

    task_id: str
    initial_observation: str
    #: Look text of every room at the start (the responder answers looks in rooms nothing changed).
    room_map: dict[str, str]


@dataclass
class ToyEpisode:
    """A simulated toy episode: the :class:`~textwm.envs.contract.SimEpisode` of the toy env."""

    task: ToyTask
    room: str = "hall"
    history: list[list[str]] = field(default_factory=list)
    actions: list[str | None] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def local_answer(self, action: str) -> str | None:
        a = " ".join(action.lower().split())
        verb, _, rest = a.partition(" ")
        if verb not in world.VERBS:
            return world.NOT_UNDERSTOOD
        if verb == "go" and rest.startswith("to "):
            return f"You go to the {rest[3:]}." if rest[3:] in world.DOORS[self.room] else "You cannot go there."
        if a == "look" and self.room not in self.changed:
            return self.task.room_map[self.room]
        return None

    def agent_message(self, observation: str) -> str:
        return observation

    def fallback_observation(self, action: str) -> str:
        return "Nothing changes."

    def wm_query(self, action: str) -> WMQuery:
        return WMQuery(system_prompt=system_prompt(self.room), state=self.state(), action=action)

    def state(self) -> str:
        return self.history[-1][1] if self.history else self.task.initial_observation

    def observe(self, action: str, observation: str, source: str) -> None:
        self.history.append([action, observation])
        self.actions.append(action)
        if observation.startswith("You go to the "):
            self.room = observation[len("You go to the "):-1]
        elif observation.startswith(("You take", "You open", "You put")):
            self.changed.append(self.room)

    def unparseable(self) -> None:
        self.actions.append(None)

    def outcome(self) -> Outcome:
        won = any(obs == world.WON for _, obs in self.history)
        return Outcome(won, "success" if won else None, 1.0 if won else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def system_prompt(room: str) -> str:
    return f"Toy house world model. The agent is in the {room}. {world.TASK} Answer with the observation only."


class ToySpec(EnvSpec):
    name = "toy"
    title = "Toy house"
    class_prefix = "Toy"
    guard_env = "TOY_WM_GUARD"
    invalid_reply_hint = "No action found. Reply with one action, e.g. look."
    agent_system_prompt = AGENT_PROMPT
    default_max_turns = 12
    success_score = 1.0

    def check_task_id(self, task_id: str) -> None:
        world.parse_task_id(task_id)

    def family_of(self, task_id: str) -> str:
        return "house"

    def example_task_id(self) -> str:
        return "toy_v0"

    def sim_task_of(self, row: Mapping[str, Any]) -> ToyTask | None:
        raw = row.get("sim_task")
        if raw is None:
            return None
        try:
            return ToyTask(**(json.loads(raw) if isinstance(raw, str) else raw))
        except (TypeError, ValueError) as exc:
            raise DataError(f"sim_task is malformed ({exc})", field="sim_task") from None

    def parse_action(self, reply: str) -> str | None:
        lines = [line.strip() for line in reply.splitlines() if line.strip()]
        return lines[0] if lines and len(lines[0]) <= 80 else None

    def start_episode(self, start: TaskStart) -> ToyEpisode:
        return ToyEpisode(task=start.sim_task)

    def episode_from_dict(self, data: Mapping[str, Any]) -> ToyEpisode:
        d = dict(data)
        return ToyEpisode(task=ToyTask(**d.pop("task")), **d)

    def open_session(self, config: Any = None) -> world.ToyHouse:
        return world.ToyHouse()

    def dataset_builder(self) -> ToyBuilder:
        return ToyBuilder()


def bake(house: world.ToyHouse, task_id: str) -> ToyTask:
    start = house.reset(task_id)
    room_map = {room: world.look_text(room, objs, False) for room, objs in house.objects.items()}
    return ToyTask(task_id=task_id, initial_observation=start.observation, room_map=room_map)


def rl_row(task: ToyTask) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": AGENT_PROMPT},
                         {"role": "user", "content": f"{world.TASK}\n\n{task.initial_observation}"}],
            "task_id": task.task_id, "instruction": world.TASK, "max_turns": 12, "sim_task": json.dumps(asdict(task))}


class ToyBuilder:
    config_class = BuildConfig
    split_note = "Splits are fixed lists of variations (toy_v0-5 train, toy_v6 dev, toy_v7-8 test)."

    def plan(self, config: BuildConfig) -> list[Job]:
        return [Job(f"toy_v{v}", "house", split, job_seed(config.seed, f"toy_v{v}"))
                for split in SPLITS for v in world.VARIATIONS[split][: config.variations[split]]]

    def open_env(self) -> world.ToyHouse:
        return world.ToyHouse()

    def run_job(self, env: world.ToyHouse, job: Job, config: BuildConfig) -> JobResult:
        task = bake(env, job.task_id)
        rows, demo = [], []
        env.reset(job.task_id)
        rows += self._play(env, task, env.gold_actions(), job, "gold", demo)
        gold_score = 1.0 if env.won else 0.0
        rng = random.Random(job.seed)
        for k in range(config.explore_episodes):
            env.reset(job.task_id)
            actions = [rng.choice([*env.valid_actions(), "dance", "take unicorn"]) for _ in range(config.explore_steps)]
            rows += self._play(env, task, actions, job, f"explore{k}", None)
        messages = [*rl_row(task)["messages"]]
        for action, observation in demo:
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
        return JobResult(job=job, rows=rows, rl=rl_row(task), sft={"messages": messages[:-1], "task_id": job.task_id},
                         gold_score=gold_score)

    @staticmethod
    def _play(env: world.ToyHouse, task: ToyTask, actions: list[str], job: Job, source: str,
              record: list | None) -> list[dict[str, Any]]:
        episode, rows = ToyEpisode(task), []
        for step, action in enumerate(actions):
            query = episode.wm_query(action)
            result = env.step(action)
            rows.append({"messages": [{"role": "system", "content": query.system_prompt},
                                      {"role": "user", "content": wm_user_message(query.state, action)},
                                      {"role": "assistant", "content": result.observation}],
                         "task_id": job.task_id, "task": job.family, "split": job.split, "step": step,
                         "source": "gold" if source == "gold" else "explore"})
            episode.observe(action, result.observation, "env")
            if record is not None:
                record.append((action, result.observation))
            if result.done:
                break
        return rows
