"""AppWorld's env spec: what the generic Stage-2 layers need to know about AppWorld, in one place.

* rows: the paper's ``appworld_rl_split_clean.jsonl`` rows as they are (``task_id``, ``messages`` as a list or
  a JSON string, ``instruction``, ``ground_truth``, ``wm_system_prompt``, ``max_turns``); the world is read from
  ``wm_system_prompt`` (:mod:`~textwm.envs.appworld.world`); families are AppWorld scenarios (``692c77d`` of
  ``692c77d_2``);
* agent side: one tool call per reply in any backbone's form (:mod:`~textwm.envs.appworld.calls`), answered
  as ``<tool_response>...</tool_response>``; two unparseable replies in a row end an episode;
* simulator: :class:`~textwm.envs.appworld.sim.AppWorldEpisode`; ``APPWORLD_WM_GUARD=0`` sends every call to
  the world model; ``APPWORLD_WM_PROMPT=paper`` queries it in the paper's layout (rows built with
  ``--prompt-style paper`` say so themselves, ``wm_prompt``); ``APPWORLD_PAPER_RESPONDER=1``
  answers as the paper's plugin does where it can (records, canned writes); ``APPWORLD_WM_JSON_REPAIR=1`` repairs
  world-model answers as it does; ``APPWORLD_WM_ANCHORS=1`` sends the part of a response the call and the API's
  schema decide (a list's brackets, an object's keys, a 422's wording) as a template (``responder.known_frame``);
* reward: :mod:`~textwm.envs.appworld.reward` (the answer against ``ground_truth``, credentials, placeholders,
  repeats); success: a question task answered right;
* real env: :class:`~textwm.envs.appworld.real.AppWorldEnv`, the installed AppWorld apps in their own
  interpreter, on a database seeded from the row's records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from textwm.envs.appworld import agent, expert, responder, reward
from textwm.envs.appworld.build import AppWorldBuilder
from textwm.envs.appworld.real import AppWorldEnv, AppWorldSessionConfig
from textwm.envs.appworld.sim import AppWorldEpisode
from textwm.envs.appworld.wm_prompt import LAYOUTS, WM_PROMPT_ENV
from textwm.envs.appworld.world import World, world_of_row
from textwm.envs.contract import EnvSpec, Outcome, TaskStart
from textwm.envs.protocol import BadRequest, EnvSession
from textwm.envs.simulator import flag_from_env, wm_prompt_from_env

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PAPER_RESPONDER_ENV = "APPWORLD_PAPER_RESPONDER"
JSON_REPAIR_ENV = "APPWORLD_WM_JSON_REPAIR"


class AppWorldSpec(EnvSpec):
    name = "appworld"
    title = "AppWorld"
    class_prefix = "AppWorld"
    guard_env = "APPWORLD_WM_GUARD"
    anchors_env = "APPWORLD_WM_ANCHORS"
    unparseable_limit = reward.UNPARSEABLE_LIMIT
    invalid_reply_hint = ('You must reply with exactly one tool call and no prose, as this JSON array: '
                          '[{"name": "tool_name", "parameters": {"param": "value"}}]')
    agent_system_prompt = agent.AGENT_SYSTEM_PROMPT
    default_max_turns = agent.DEFAULT_MAX_TURNS
    success_score = reward.SUCCESS_SCORE
    has_paper_reward = True
    session_config = AppWorldSessionConfig
    conversation_expert = True

    # --- rows ----------------------------------------------------------------------------------------

    def check_task_id(self, task_id: str) -> None:
        if not _TASK_ID.match(task_id):
            raise BadRequest(f"task id {task_id!r} must be an AppWorld task id such as {self.example_task_id()!r}")

    def family_of(self, task_id: str) -> str:
        return task_id.rsplit("_", 1)[0] if "_" in task_id else task_id

    def example_task_id(self) -> str:
        return "692c77d_2"

    def sim_task_of(self, row: Mapping[str, Any]) -> World | None:
        return None if row.get("wm_system_prompt") is None else world_of_row(row)

    def missing_sim_task(self, task_id: str) -> str:
        return (f"row {task_id!r} has no 'wm_system_prompt': the simulator needs the user's accounts and app records "
                "(the paper's appworld_rl_split rows carry them; appworld/build_wm_dataset.py writes such rows)")

    # --- agent side, simulator ------------------------------------------------------------------------

    def parse_action(self, reply: str) -> str | None:
        return agent.parse_action(reply)

    def agent_message(self, observation: str, info: Mapping[str, Any]) -> str:
        return agent.tool_response_message(observation)

    def expert_reply_to(self, conversation: Sequence[Mapping[str, str]]) -> str | None:
        """The scripted expert's next call from the conversation alone (generated question tasks; None for others)."""
        messages = [m for m in conversation if m["role"] != "system"]
        if not messages or messages[0]["role"] != "user":
            return None
        history = []
        for reply, response in zip(messages[1::2], messages[2::2]):
            action = agent.parse_action(reply["content"])
            if action is not None:
                history.append((action, agent.unwrap_tool_response(response["content"])))
        return expert.next_call(messages[0]["content"], history)

    def reward_cases(self) -> list[tuple[str, Outcome, dict[str, Any], str]]:
        return reward.reward_cases()

    def reward_context(self, episode: AppWorldEpisode) -> dict[str, Any]:
        w = episode.world
        return {"instruction": w.instruction, "ground_truth": w.ground_truth,
                "credentials": {a.app: [a.username, a.password] for a in w.accounts}}

    def paper_reward(self, outcome: Outcome, episode: Mapping[str, Any]) -> float:
        context = episode.get("reward_context") or {}
        if "instruction" not in context:
            raise ValueError("appworld's paper reward needs the episode's reward_context (instruction, ground_truth, "
                             "credentials): the rollout infos of textwm's appworld scheduler carry it")
        rules = reward.rules_for(context["ground_truth"],
                                 {app: tuple(pair) for app, pair in context["credentials"].items()})
        return reward.paper_reward(rules, episode.get("actions") or [], episode.get("observations") or [],
                                   episode.get("last_reply"), context["instruction"])

    def start_episode(self, start: TaskStart) -> AppWorldEpisode:
        world = start.sim_task
        layout = wm_prompt_from_env(WM_PROMPT_ENV, LAYOUTS) or world.wm_prompt
        if layout not in LAYOUTS:
            raise ValueError(f"AppWorld row {start.task_id!r}: wm_prompt {layout!r} is no WM prompt layout (use one "
                             f"of {', '.join(LAYOUTS)})")
        return AppWorldEpisode.start(world, layout=layout, start_messages=start.messages,
                                     paper_responder=flag_from_env(PAPER_RESPONDER_ENV, False),
                                     wm_json_repair=flag_from_env(JSON_REPAIR_ENV, False))

    def episode_from_dict(self, data: Mapping[str, Any]) -> AppWorldEpisode:
        return AppWorldEpisode.from_dict(dict(data))

    # --- real env -------------------------------------------------------------------------------------

    def open_session(self, config: AppWorldSessionConfig | None = None) -> EnvSession:
        return AppWorldEnv(config)

    def prepare_real(self, rows_path: str, starts: list[TaskStart], work_dir: Any,
                     config: AppWorldSessionConfig | None = None) -> AppWorldSessionConfig:
        """The rows file is what the real env seeds its worlds from."""
        config = config or AppWorldSessionConfig()
        rows = [*config.rows, rows_path] if rows_path not in config.rows else list(config.rows)
        return replace(config, rows=rows)

    def observed_frame(self, observation: str) -> list[tuple[bool, str]] | None:
        return responder.observed_frame(observation)

    def dataset_builder(self) -> Any:
        return AppWorldBuilder()
