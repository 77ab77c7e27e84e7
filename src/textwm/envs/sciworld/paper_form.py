"""The paper's ScienceWorld env-server wire form (``sciworld/sciworld_env_server.py`` of
patronus-ai/mdlm_world_modeling), answered by our env server beside its own routes.

    POST   /  {"task_id": <key>, "action"?}  -> {"observation", "score", "reward", "done"}
    DELETE /  {"task_id": <key>}             -> {"status": "closed"}

The key names the session: the first POST of a key opens one on the task the key names (the part before
``_gen``: ``boil_v3_gen1a2b3c`` plays ``boil_v3``, the paper's rule) with the server's default simplification
(``easy``, as the paper's server loaded every task), then steps the action, as every later POST does. A POST
without an action steps ``look around`` (the paper's default), so it is not a reset: DELETE the key, then POST
again, to start over. DELETE of a key without a session answers closed as well (``eval_sciworld.py`` closes
before it starts).

Left out of the answer: the paper's ``valid_actions`` and ``valid_objects`` (the env's first 20 action
templates and objects), which none of the paper's clients read and which cost the env an enumeration per
step; ``POST /step`` with ``"with_valid_actions": true`` gives the valid actions. A key must name a
``<task>_v<variation>`` (the paper's server took a bare task name as variation 0).
"""

from __future__ import annotations

from typing import Any

from textwm.envs.protocol import PaperForm
from textwm.envs.sciworld.env import parse_task_id

#: The paper's server stripped everything from this marker on (``base_id = task_id.split("_gen")[0]``).
GEN_MARKER = "_gen"


class SciWorldPaperForm(PaperForm):
    step_paths = ("/",)
    close_paths = ("/",)
    default_action = "look around"
    open_on_step = True

    def start_of_key(self, key: str) -> tuple[str, dict[str, Any]]:
        task_id = key.split(GEN_MARKER, 1)[0]
        parse_task_id(task_id)  # BadRequest naming the expected shape
        return task_id, {}

    def step_reply(self, reply: dict[str, Any]) -> dict[str, Any]:
        return {k: reply[k] for k in ("observation", "score", "reward", "done")}
