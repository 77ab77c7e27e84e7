"""ALFWorld's env spec: what the generic Stage-2 layers need to know about ALFWorld, in one place.

* rows: the paper's ``alfworld_rl.jsonl`` rows as they are (task id from ``game_file``, the scene read from
  ``wm_system_prompt``, :mod:`~textwm.envs.alfworld.rows`), and this project's rows (``task_id``,
  ``sim_task``); families are the six task types;
* agent side: ``Action: <command>`` (:func:`~textwm.envs.alfworld.agent.parse_action`), each turn the
  observation and the admissible commands; one unparseable reply ends an episode (as in the paper);
* simulator: :class:`~textwm.envs.alfworld.sim.AlfWorldEpisode`; ``ALFWORLD_WM_GUARD=0`` sends every step
  to the world model;
* reward: the paper's shaped reward (:mod:`~textwm.envs.alfworld.reward`); success: the goal holds;
* real env: :class:`~textwm.envs.alfworld.env.AlfWorldEnv` (textworld + ALFWorld's wrappers), games
  resolved under ``--games-dir`` / ``$ALFWORLD_DATA``; the handcoded expert's action in every info.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs.alfworld import agent, responder, reward
from textwm.envs.alfworld.build import AlfWorldBuilder
from textwm.envs.alfworld.env import AlfWorldEnv, AlfWorldSessionConfig, games_roots, resolve_game
from textwm.envs.alfworld.gamebank import games_for_rows
from textwm.envs.alfworld.lenient import lenient_enabled
from textwm.envs.alfworld.paper_form import AlfWorldPaperForm
from textwm.envs.alfworld.rows import sim_task_of, task_id_from_game_file
from textwm.envs.alfworld.scene import Scene
from textwm.envs.alfworld.sim import LAYOUTS, AlfWorldEpisode
from textwm.envs.contract import EnvSpec, Outcome, TaskStart
from textwm.envs.protocol import BadRequest, EnvSession, ResetResult
from textwm.envs.simulator import wm_prompt_from_env

log = logging.getLogger(__name__)
#: ``paper``: the simulator queries the world model in the paper's layout (``scene``: ours, the default).
WM_PROMPT_ENV = "ALFWORLD_WM_PROMPT"
_PART = re.compile(r"^[A-Za-z0-9_.+-]+$")


class AlfWorldSpec(EnvSpec):
    name = "alfworld"
    title = "ALFWorld"
    class_prefix = "AlfWorld"
    guard_env = "ALFWORLD_WM_GUARD"
    #: ``1``: "You arrive at X. On the X, you see " ... "." around an unknown listing goes as a template.
    anchors_env = "ALFWORLD_WM_ANCHORS"
    unparseable_limit = reward.UNPARSEABLE_LIMIT
    invalid_reply_hint = ("Your last response was not parseable. Reply with exactly one line: "
                          "'Action: <command>', the command copied from the admissible commands.")
    agent_system_prompt = agent.AGENT_SYSTEM_PROMPT
    default_max_turns = agent.DEFAULT_MAX_TURNS
    success_score = reward.SUCCESS_SCORE
    has_paper_reward = True
    session_config = AlfWorldSessionConfig
    #: The paper's env-server wire form (``/reset``, ``/step``, ``/close`` by task-id key), answered beside ours.
    paper_form = AlfWorldPaperForm()

    # --- rows ----------------------------------------------------------------------------------------

    def task_id_of(self, row: Mapping[str, Any]) -> str:
        task_id = row.get("task_id")
        if isinstance(task_id, str) and task_id:
            return task_id
        game_file = row.get("game_file")
        if not isinstance(game_file, str) or not game_file:
            raise DataError("row has neither 'task_id' nor 'game_file' (an ALFWorld game folder)", field="task_id")
        return task_id_from_game_file(game_file)

    def check_task_id(self, task_id: str) -> None:
        parts = task_id.split("/")
        if len(parts) < 2 or not all(_PART.match(p) for p in parts) or ".." in parts:
            raise BadRequest(f"task id {task_id!r} must be a game folder relative to a games root, e.g. "
                             f"{self.example_task_id()}")

    def validate_task(self, task_id: str, config: AlfWorldSessionConfig | None = None) -> None:
        """The game exists under the session's games roots (before any game is loaded)."""

        resolve_game(task_id, games_roots((config or AlfWorldSessionConfig()).games_dir))

    def family_of(self, task_id: str) -> str:
        """The task type, from the task folder (``pick_two_obj_and_place-CD-None-Drawer-301``)."""
        parts = task_id.split("/")
        folder = parts[-2] if len(parts) >= 2 else parts[0]
        return folder.split("-", 1)[0]

    def example_task_id(self) -> str:
        return "train/pick_and_place_simple-Mug-None-Cabinet-1/trial_0"

    def load_row(self, row: Mapping[str, Any], *, need_sim: bool = False) -> TaskStart:
        start = super().load_row(row, need_sim=need_sim)
        scene: Scene = start.sim_task
        family = scene.goal.task_type  # a row's task type beats what its folder name says
        return TaskStart(task_id=start.task_id, family=family, messages=start.messages, max_turns=start.max_turns,
                         sim_task=scene, reset_options={})

    def sim_task_of(self, row: Mapping[str, Any]) -> Scene:
        return sim_task_of(row, self.task_id_of(row))

    # --- agent side, simulator, reward -----------------------------------------------------------------

    def parse_action(self, reply: str) -> str | None:
        return agent.parse_action(reply)

    def agent_message(self, observation: str, info: Mapping[str, Any]) -> str:
        return agent.user_turn(observation, info.get("admissible_commands") or [])

    def expert_reply(self, info: Mapping[str, Any]) -> str | None:
        action = info.get("expert_action")
        return agent.format_reply(action) if action else None

    def reward_cases(self) -> list[tuple[str, Outcome, dict[str, Any], str]]:
        return reward.reward_cases()

    def paper_reward(self, outcome: Outcome, episode: Mapping[str, Any]) -> float:
        return reward.paper_reward(outcome, episode.get("last_reply"))

    def start_episode(self, start: TaskStart) -> AlfWorldEpisode:
        layout = wm_prompt_from_env(WM_PROMPT_ENV, LAYOUTS) or start.sim_task.wm_prompt
        return AlfWorldEpisode.start(start.sim_task, start.messages if layout == "paper" else (), layout,
                                     lenient=lenient_enabled())

    def episode_from_dict(self, data: Mapping[str, Any]) -> AlfWorldEpisode:
        return AlfWorldEpisode.from_dict(dict(data))

    # --- real env -------------------------------------------------------------------------------------

    def open_session(self, config: AlfWorldSessionConfig | None = None) -> EnvSession:
        return AlfWorldEnv(config)

    def prepare_real(self, rows_path: str, starts: list[TaskStart], work_dir: Any,
                     config: AlfWorldSessionConfig | None = None) -> AlfWorldSessionConfig:
        """Every row's game: its own ``game_file`` or the downloaded one where it exists, else rebuilt from the row
        under ``work_dir`` (see :func:`~textwm.envs.alfworld.gamebank.games_for_rows`)."""
        rows = read_jsonl(rows_path).rows
        by_id = {self.task_id_of(r): r for r in rows}
        found = games_for_rows([by_id[s.task_id] for s in starts], starts, work_dir)
        config = config or AlfWorldSessionConfig()
        n = sum(v == "rebuilt" for v in found.sources.values())
        log.info("ALFWorld games: %d found, %d rebuilt from their rows under %s", len(found.sources) - n, n, work_dir)
        return replace(config, games_dir=[*config.games_dir, *found.roots])

    def reset_record(self, reset: ResetResult) -> dict[str, Any]:
        return {"init_admissible": list(reset.info.get("admissible_commands") or [])}

    def real_start(self, start: TaskStart, reset: ResetResult) -> tuple[list[dict[str, str]], bool]:
        """The first user message from the real reset (the observation and the game's admissible commands);
        ``rebuilt`` when it differs from the row's."""
        messages = [dict(m) for m in start.messages]
        first = agent.user_turn(reset.observation, reset.info.get("admissible_commands") or [])
        if messages and messages[-1]["role"] == "user" and messages[-1]["content"] == first:
            return messages, False
        if messages and messages[-1]["role"] == "user":
            messages[-1] = {"role": "user", "content": first}
        else:
            messages.append({"role": "user", "content": first})
        return messages, True

    def observed_frame(self, observation: str) -> list[tuple[bool, str]] | None:
        return responder.observed_frame(observation)

    def dataset_builder(self) -> Any:
        return AlfWorldBuilder()

