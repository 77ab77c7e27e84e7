"""The paper's ALFWorld env-server wire form (``alfworld/alfworld_env_server.py`` of
patronus-ai/mdlm_world_modeling), answered by our env server beside its own routes.

    POST   /reset {"task_id": <key>, "game_file", "split"?}  -> {"obs", "admissible", "goal", "gamefile"}
    POST   /step  {"task_id": <key>, "action"}               -> {"obs", "admissible", "won", "done", "score"}
    DELETE /close {"task_id": <key>}  (or DELETE /)          -> {"status": "closed"}

The key names the session (``eval-1f2e3d4c``); a reset of a key that has one plays the new game in it. Our
``/reset`` and ``/step`` take these bodies too: a reset body with ``game_file`` or ``split``, a step body with
``task_id`` and no ``session_id``, is the paper's. ``game_file`` (the paper rows' path of a ``game.tw-pddl``)
is resolved as a task id (its part after ``json_2.1.1/``, else its last three folders) under the server's games
roots (``--games-dir``, ``$ALFWORLD_DATA``), so it is required: the paper's server played a random game of
``split`` without one, ours refuses (400). ``split`` is accepted and not used (the game names its split).
``goal`` is the reset text after "Your task is to:", as the paper's server cut it; ``gamefile`` is the
``game_file`` asked for; ``score`` is 1.0 once won, and ``done`` is true then.
"""

from __future__ import annotations

from typing import Any

from textwm.data.jsonl import DataError
from textwm.envs.alfworld.rows import task_id_from_game_file
from textwm.envs.protocol import BadRequest, PaperForm

GOAL_MARKER = "Your task is to:"


def goal_of(observation: str) -> str:
    """The goal in a reset text, as the paper's server cut it (trailing period kept), "" if it names none."""
    return observation.split(GOAL_MARKER, 1)[1].strip() if GOAL_MARKER in observation else ""


class AlfWorldPaperForm(PaperForm):
    step_paths = ("/step",)
    reset_paths = ("/reset",)
    reset_fields = ("game_file", "split")
    close_paths = ("/close", "/")

    def start_of_reset(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        game_file = body.get("game_file")
        if not game_file:
            raise BadRequest("game_file is required (the path of a game.tw-pddl, as in the paper's rows): this "
                             "server does not pick a random game of a split")
        try:
            return task_id_from_game_file(game_file), {}
        except DataError as exc:
            raise BadRequest(str(exc)) from None

    def reset_reply(self, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        return {"obs": reply["observation"], "admissible": list(reply["info"]["admissible_commands"]),
                "goal": goal_of(reply["observation"]), "gamefile": body["game_file"]}

    def step_reply(self, reply: dict[str, Any]) -> dict[str, Any]:
        info = reply["info"]
        return {"obs": reply["observation"], "admissible": list(info["admissible_commands"]),
                "won": bool(info["won"]), "done": bool(reply["done"]), "score": float(reply["score"])}
