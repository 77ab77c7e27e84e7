"""ALFWorld behind the env protocol: one textworld ``PddlEnv`` per session, ALFWorld's wrappers and expert.

A task id is the folder of a game relative to a games root, e.g.
``train/pick_clean_then_place_in_recep-Ladle-None-Cabinet-2/trial_T20190908_220534_690455`` (the part
of a paper row's ``game_file`` after ``json_2.1.1/``). The roots, searched in order: the session's
``--games-dir`` folders, then ``$ALFWORLD_DATA/json_2.1.1`` (the downloaded data, where a user has it).
Games come from ``alfworld/build_games.py`` (generated offline, or rebuilt from paper rows) or from
``alfworld-download``.

Every reset and step reports the admissible commands (``info["admissible_commands"]``, the env's own
sorted list) and the handcoded expert's next action (``info["expert_action"]``; None when the expert
has none). The score is 1.0 once the goal holds (ALFWorld's ``won``), and the episode is then done.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import option
from textwm.envs.alfworld import alfred
from textwm.envs.alfworld.games import GAME_FILE
from textwm.envs.protocol import BadRequest, EnvError, EnvFailed, ResetResult, StepResult

log = logging.getLogger(__name__)

#: Where ``alfworld-download`` puts the games under ``$ALFWORLD_DATA``.
DOWNLOAD_SUBDIR = "json_2.1.1"
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"


def games_roots(games_dirs: tuple[str, ...] | list[str] = ()) -> list[Path]:
    """The folders task ids are resolved in: ``games_dirs`` (or ``$ALFWORLD_GAMES``, ``:``-separated), then the
    downloaded data (``$ALFWORLD_DATA/json_2.1.1``) when it exists."""
    dirs = list(games_dirs) or [d for d in os.environ.get("ALFWORLD_GAMES", "").split(os.pathsep) if d]
    roots = [Path(d).expanduser().resolve() for d in dirs]
    data = os.environ.get("ALFWORLD_DATA")
    if data and (Path(data) / DOWNLOAD_SUBDIR).is_dir():
        roots.append((Path(data) / DOWNLOAD_SUBDIR).resolve())
    return roots


def resolve_game(task_id: str, roots: list[Path]) -> Path:
    """The ``game.tw-pddl`` of ``task_id`` under one of ``roots``; BadRequest naming what is wrong."""
    if not task_id or task_id.startswith("/") or ".." in Path(task_id).parts or "\\" in task_id:
        raise BadRequest(f"task id {task_id!r} must be a game folder relative to a games root "
                         "(e.g. train/pick_and_place_simple-Mug-None-Cabinet-1/game_0)")
    if not roots:
        raise BadRequest("no ALFWorld games: start the env with --games-dir DIR (games from alfworld/build_games.py) "
                         "or set $ALFWORLD_DATA to the output of alfworld-download")
    for root in roots:
        game = (root / task_id / GAME_FILE).resolve()
        if game.is_relative_to(root) and game.is_file():
            return game
    raise BadRequest(f"no game {task_id!r} under the games roots ({len(roots)} searched)")


@dataclass(frozen=True)
class AlfWorldSessionConfig:
    """Options of an ALFWorld env session (env-server flags)."""

    games_dir: list[str] = option(help="games roots task ids are resolved in (default: $ALFWORLD_GAMES, then "
                                       "$ALFWORLD_DATA/json_2.1.1)", default_factory=list)
    expert: bool = option(True, "compute the handcoded expert's next action at every step (info.expert_action)")


class AlfWorldEnv:
    """One ALFWorld game at a time (an :class:`~textwm.envs.protocol.EnvSession`)."""

    def __init__(self, config: AlfWorldSessionConfig | None = None):
        self.config = config or AlfWorldSessionConfig()
        self.roots = games_roots(self.config.games_dir)
        self._env = alfred.make_env(expert=self.config.expert)
        self._state: Any = None
        self._loaded: tuple[Path, int] | None = None
        self.task_id: str | None = None
        self.expert_failures = 0

    def reset(self, task_id: str, **options: Any) -> ResetResult:
        if options:
            raise BadRequest(f"ALFWorld takes no reset options, got {sorted(options)}")
        game = resolve_game(task_id, self.roots)
        try:
            key = (game, game.stat().st_mtime_ns)
            if key != self._loaded:  # loading translates the PDDL task: half of a reset's time
                self._loaded = None
                self._env.load(str(game))
                self._loaded = key
            self._state = self._env.reset()
        except Exception as exc:  # noqa: BLE001 -- textworld raises anything on a bad game; the session is fine
            self._state = None
            raise BadRequest(f"game {task_id!r} does not load: {type(exc).__name__}: {exc}") from None
        self.task_id = task_id
        feedback = self._state["feedback"]
        goal = feedback.split("Your task is to: ", 1)[-1].strip().rstrip(".")
        return ResetResult(observation=feedback.strip(), task_description=goal, info=self._info())

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise BadRequest("step before reset")
        try:
            self._state, _, done = self._env.step(action)
        except EnvError:
            raise
        except Exception as exc:  # noqa: BLE001 -- textworld itself failed: its game state is no longer trustworthy
            self._state = None
            raise EnvFailed(f"ALFWorld failed on {action!r}: {type(exc).__name__}: {exc}") from None
        won = bool(self._state["won"])
        return StepResult(observation=self._state["feedback"].strip(), reward=float(won), score=float(won),
                          done=bool(done or won), info=self._info())

    def valid_actions(self) -> list[str]:
        if self._state is None:
            raise BadRequest("no game loaded: reset first")
        return list(self._state["admissible_commands"])

    def close(self) -> None:
        self._env.close()
        self._state = None

    def _info(self) -> dict[str, Any]:
        plan = self._state.get("extra.expert_plan") or []
        expert = plan[0] if plan and plan[0] in self._state["admissible_commands"] else None
        return {"admissible_commands": list(self._state["admissible_commands"]), "expert_action": expert,
                "won": bool(self._state["won"])}
