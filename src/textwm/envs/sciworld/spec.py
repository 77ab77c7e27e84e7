"""ScienceWorld's env spec: what the generic Stage-2 layers need to know about ScienceWorld, in one place.

* rows: the RL task rows of ``sciworld/build_wm_dataset.py`` (the paper's columns plus ``sim_task``:
  the start state baked from the real env and the gold run's scoring goals);
* agent side: :func:`~textwm.envs.sciworld.agent.parse_action`, the format hint, 3 unparseable
  replies in a row end an episode;
* simulator: :class:`~textwm.envs.sciworld.sim.SciWorldEpisode` (tracker + local responder + WM prompt
  + trajectory outcome); ``SCIWORLD_WM_GUARD=0`` sends every step to the world model;
  ``SCIWORLD_WM_PROMPT=paper`` (or ``full`` / ``compact``) overrides the WM prompt layout the rows carry;
  ``SCIWORLD_PAPER_RESPONDER=1`` answers locally as the paper's plugin does (teleports, "(1 tick passes)", its
  tracked inventory, focus on an unknown name refused) instead of with the responder; ``SCIWORLD_WM_ANCHORS=1``
  sends a look it cannot answer whole as a template of the room's known lines (``responder.known_frame``);
* reward: score / 100; a wrong focus keeps the progress before it, a loop or a streak its progress
  minus 0.1 (:func:`~textwm.envs.sciworld.reward.reward`); success: score 100; the paper's rule
  (:func:`~textwm.envs.sciworld.reward.paper_reward`) with ``reward: paper``;
* real env: :class:`~textwm.envs.sciworld.env.SciWorldEnv` (one JVM per session), reset option
  ``simplification``, the task catalog warmed once per worker.

The paper's released RL rows (``sciworld_rl_split.jsonl``) have no ``sim_task``: they carry a prompt for
the world model, but neither a start state the tracker can follow nor the goals a score needs (every
simulated episode would get the same reward, and GRPO would learn nothing, silently). :meth:`load_row`
with ``need_sim`` refuses such a row by name; the loaders of GRPO and in-WM evaluation complete it first
through :mod:`textwm.envs.sim_cache`, which bakes the start state from the real env once per task id and
simplification (:meth:`build_sim_task`, :func:`~textwm.envs.sciworld.tasks.bake_sim_task`) and caches it.
The row's own ``messages`` (the paper's agent prompt) stay the agent's conversation.

``SCIWORLD_ENV_URL`` (the paper's switch, :attr:`replay_url_env`) points GRPO's reward at a real env
server: each episode's actions are replayed there and the real score is rewarded
(:mod:`textwm.rl.replay`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from textwm.data.jsonl import DataError
from textwm.envs.contract import EnvSpec, Outcome, TaskStart
from textwm.envs.protocol import EnvSession, ResetResult
from textwm.envs.sciworld import agent, probes, responder, reward
from textwm.envs.sciworld.build import SciWorldBuilder
from textwm.envs.sciworld.env import (
    DEFAULT_SIMPLIFICATION,
    SciWorldEnv,
    SciWorldSessionConfig,
    check_task,
    parse_task_id,
    task_catalog,
)
from textwm.envs.sciworld.paper_form import SciWorldPaperForm
from textwm.envs.sciworld.sim import SciWorldEpisode
from textwm.envs.sciworld.tasks import bake_sim_task, sim_task_version
from textwm.envs.sciworld.tracker import Task
from textwm.envs.sciworld.wm_prompt import PROMPT_STYLES
from textwm.envs.simulator import flag_from_env, wm_prompt_from_env


def _clean_sim_task(sim: Any) -> Any:
    """Undo what a columnar dataset loader does to ``sim_task``: rows of other tasks add null rooms/keys."""
    if isinstance(sim, str):
        sim = json.loads(sim)
    if not isinstance(sim, Mapping):
        return sim
    sim = {k: v for k, v in sim.items() if v is not None}
    if isinstance(sim.get("room_map"), Mapping):
        sim["room_map"] = {room: text for room, text in sim["room_map"].items() if text is not None}
    return sim


#: Overrides the WM prompt layout the task rows carry (``paper``: query a world model trained on the paper's data
#: in the paper's layout, e.g. on the paper's released rows, whose start state is baked here).
WM_PROMPT_ENV = "SCIWORLD_WM_PROMPT"
PAPER_RESPONDER_ENV = "SCIWORLD_PAPER_RESPONDER"


class SciWorldSpec(EnvSpec):
    name = "sciworld"
    title = "ScienceWorld"
    class_prefix = "SciWorld"
    guard_env = "SCIWORLD_WM_GUARD"
    #: ``1``: a look the responder cannot answer whole goes as a template of the room's name line and door list.
    anchors_env = "SCIWORLD_WM_ANCHORS"
    unparseable_limit = reward.UNPARSEABLE_STREAK_LIMIT
    invalid_reply_hint = ("Your reply contained no action. Reply with exactly one ScienceWorld action as plain text "
                          "on one line, for example: look around, teleport to kitchen, pick up thermometer, "
                          "activate stove.")
    agent_system_prompt = agent.AGENT_SYSTEM_PROMPT
    default_max_turns = agent.DEFAULT_MAX_TURNS
    success_score = reward.SUCCESS_SCORE
    has_paper_reward = True
    reset_options = ("simplification",)
    session_config = SciWorldSessionConfig
    #: The paper's env-server wire form (``POST /`` / ``DELETE /`` by task-id key), answered beside ours.
    paper_form = SciWorldPaperForm()
    builds_sim_tasks = True
    #: The paper's switch: the reward replays each episode's actions in this env server (sciworld_plugin.py).
    replay_url_env = "SCIWORLD_ENV_URL"

    # --- rows ----------------------------------------------------------------------------------------

    def check_task_id(self, task_id: str) -> None:
        parse_task_id(task_id)

    def validate_task(self, task_id: str, config: Any = None) -> None:
        check_task(parse_task_id(task_id))  # against the task catalog the worker warmed

    def family_of(self, task_id: str) -> str:
        return parse_task_id(task_id).task

    def example_task_id(self) -> str:
        return "boil_v11"

    def sim_task_of(self, row: Mapping[str, Any]) -> Task | None:
        raw = row.get("sim_task")
        if raw is None:
            return None
        try:
            task = Task(**_clean_sim_task(raw))
        except (TypeError, ValueError) as exc:
            raise DataError(f"sim_task is malformed ({exc}); rebuild it with sciworld/build_wm_dataset.py",
                            field="sim_task") from None
        return task

    def check_sim_task(self, sim_task: Task) -> None:
        if not sim_task.goals.get("milestones"):
            raise DataError("sim_task has no goal milestones, so no simulated episode could score; rebuild the "
                            "rows with sciworld/build_wm_dataset.py", field="sim_task.goals")

    def missing_sim_task(self, task_id: str) -> str:
        task = task_id.rsplit("_v", 1)[0]
        return (f"RL row {task_id!r} has no 'sim_task' (the start state and goals the simulator scores with); rows "
                "of the paper's release have none. Complete them from the real env, once, cached: "
                "`python -m textwm.envs.sim_cache --env sciworld --rows FILE` (GRPO and in-WM evaluation do it "
                "on their own), or rebuild the rows, e.g. "
                f"`python sciworld/build_wm_dataset.py --out-dir runs/sciworld_data --tasks {task}`")

    def reset_options_of(self, sim_task: Task | None) -> dict[str, Any]:
        return {"simplification": sim_task.simplification} if sim_task is not None else {}

    def build_options_of(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The paper's rows are of the ``easy`` simplification (their start rooms show open doors); a row's own
        ``simplification`` column, if any, wins."""
        simplification = row.get("simplification")
        return {"simplification": simplification if isinstance(simplification, str) else DEFAULT_SIMPLIFICATION}

    def build_sim_task(self, session: EnvSession, task_id: str, reset_options: Mapping[str, Any]) -> dict[str, Any]:
        ref = parse_task_id(task_id)  # a _gen<k> copy plays its base task
        task = bake_sim_task(session, ref.task_id, simplification=reset_options.get("simplification"))
        return {**dataclasses.asdict(task), "task_id": task_id}

    def sim_task_version(self) -> str:
        return sim_task_version()

    # --- agent side, simulator, reward -----------------------------------------------------------------

    def parse_action(self, reply: str) -> str | None:
        return agent.parse_action(reply)

    def start_episode(self, start: TaskStart) -> SciWorldEpisode:
        task = start.sim_task
        layout = wm_prompt_from_env(WM_PROMPT_ENV, PROMPT_STYLES)
        if layout and layout != task.prompt_style:
            task = dataclasses.replace(task, prompt_style=layout)
        return SciWorldEpisode.start(task, start.messages, paper_responder=flag_from_env(PAPER_RESPONDER_ENV, False))

    def episode_from_dict(self, data: Mapping[str, Any]) -> SciWorldEpisode:
        return SciWorldEpisode.from_dict(dict(data))

    def reward(self, outcome: Outcome) -> float:
        return reward.reward(outcome)

    def probe_world_model(self, rows: Sequence[Mapping[str, Any]], wm: Any, out: Any, *,
                          workers: int = 1) -> dict[str, Any] | None:
        """The lifespan probes (:mod:`~textwm.envs.sciworld.probes`) on the lifespan rows; None when there are none."""
        lifespan = [r for r in rows if str(r.get("task_id", "")).startswith(probes.TASK_PREFIX)]
        return probes.run_probes(lifespan, wm, Path(out), workers=workers) if lifespan else None

    def reward_cases(self) -> list[tuple[str, Outcome, dict[str, Any], str]]:
        return reward.reward_cases()

    def paper_reward(self, outcome: Outcome, episode: Mapping[str, Any]) -> float:
        return reward.paper_reward(outcome.score, [a for a in episode.get("actions") or () if a is not None])

    # --- real env -------------------------------------------------------------------------------------

    def open_session(self, config: SciWorldSessionConfig | None = None) -> EnvSession:
        config = config or SciWorldSessionConfig()
        return SciWorldEnv(step_limit=config.step_limit, simplification=config.simplification)

    def prepare_worker(self) -> dict[str, Any]:
        return {"tasks": len(task_catalog())}  # one JVM, ~5 s; every later reset validates against it

    def end_reason(self, score: float) -> str:
        if score >= reward.SUCCESS_SCORE:
            return "success"
        if score <= reward.WRONG_FOCUS_SCORE:
            return "wrong_focus"
        return "env_done"  # the step limit, or a task the env completed below 100

    def end_outcome(self, score: float, previous_score: float) -> Outcome:
        if self.end_reason(score) == "wrong_focus":
            return reward.wrong_focus(previous_score)
        return super().end_outcome(score, previous_score)

    def real_start(self, start: TaskStart, reset: ResetResult) -> tuple[list[dict[str, str]], bool]:
        """Mendelian-genetics tasks are random across loads: when the real reset differs from the row's baked
        start, the first user message is rebuilt from the real reset."""
        messages = [dict(m) for m in start.messages]
        baked: Task | None = start.sim_task
        if baked is None or baked.initial_observation == reset.observation:
            return messages, False
        real = Task(task_id=start.task_id, task_description=reset.task_description,
                    initial_observation=reset.observation, initial_inventory="", room_map={},
                    simplification=baked.simplification or DEFAULT_SIMPLIFICATION)
        messages[-1] = {"role": "user", "content": agent.first_user_message(real)}
        return messages, True

    def observed_frame(self, observation: str) -> list[tuple[bool, str]] | None:
        return responder.observed_frame(observation)

    def dataset_builder(self) -> Any:
        return SciWorldBuilder()
