"""Print the world-model query of one step, as chat messages, to check a layout against the paper's byte for byte.

    python -m textwm.envs.wm_prompt --env sciworld --format paper --step STEP.json

prints ``{"messages": [system, user]}``: the system prompt the paper's builder writes and the user message its
proxy composes from the payload (``State: <state>\\n\\nAction: <action>``). ``STEP.json`` holds what the paper's
builder takes, keyed by its parameter names:

* ScienceWorld (``build_wm_prompt``): ``system_prompt`` (the row's ``wm_system_prompt``), ``conversation_history``
  (the agent's messages, its current action last), ``action_text``, ``inventory`` (a list of item names;
  optional).
* ALFWorld (``build_alfworld_wm_prompt``): ``wm_system_prompt`` (the row's), ``messages`` (the agent's messages,
  its current reply last), ``action_text`` (the parsed action; sent as plain text).
* AppWorld (``build_action_local_wm_prompt``): ``system_prompt`` (the row's ``wm_system_prompt``), ``state`` (the
  agent's messages, its current reply last), ``tool_name``, ``tool_args`` (as the plugin passes them: no
  access_token, page_limit at most 20), ``call_id`` (optional: the id of the action's tool call, which the paper
  draws at random).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.data.wm_message import wm_user_message


def _sciworld_paper(step: Mapping[str, Any]) -> list[dict[str, str]]:
    from textwm.envs.sciworld import paper_prompt  # lazy by design: an env subpackage loads only for its env

    conversation, action = _messages(step["conversation_history"], "conversation_history"), step["action_text"]
    system = paper_prompt.system_prompt(str(step["system_prompt"]), conversation, str(action),
                                        step.get("inventory") or ())
    return [{"role": "system", "content": system},
            {"role": "user", "content": wm_user_message(paper_prompt.user_state(conversation),
                                                        paper_prompt.user_action(str(action)))}]


def _alfworld_paper(step: Mapping[str, Any]) -> list[dict[str, str]]:
    from textwm.envs.alfworld import paper_prompt  # lazy by design: an env subpackage loads only for its env

    messages, action = _messages(step["messages"], "messages"), str(step["action_text"])
    return [{"role": "system", "content": paper_prompt.system_prompt(str(step["wm_system_prompt"]), messages, action)},
            {"role": "user", "content": wm_user_message(paper_prompt.user_state(messages), action)}]


def _appworld_paper(step: Mapping[str, Any]) -> list[dict[str, str]]:
    from textwm.envs.appworld import paper_prompt  # lazy by design: an env subpackage loads only for its env

    state, tool, args = _messages(step["state"], "state"), str(step["tool_name"]), step["tool_args"]
    if not isinstance(args, dict):
        raise ValueError("tool_args must be a JSON object")
    return [{"role": "system", "content": paper_prompt.system_prompt(str(step["system_prompt"]), tool, args)},
            {"role": "user", "content": wm_user_message(paper_prompt.user_state(state),
                                                        paper_prompt.user_action(tool, args, 0, step.get("call_id")))}]


def _messages(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise ValueError(f"{key} must be a list of {{role, content}} messages")
    return value


#: (env, format) -> (the step's required keys, the builder).
LAYOUTS: dict[tuple[str, str], tuple[tuple[str, ...], Callable[[Mapping[str, Any]], list[dict[str, str]]]]] = {
    ("sciworld", "paper"): (("system_prompt", "conversation_history", "action_text"), _sciworld_paper),
    ("alfworld", "paper"): (("wm_system_prompt", "messages", "action_text"), _alfworld_paper),
    ("appworld", "paper"): (("system_prompt", "state", "tool_name", "tool_args"), _appworld_paper),
}


def step_messages(env: str, fmt: str, step: Mapping[str, Any]) -> list[dict[str, str]]:
    """The query's chat messages for ``step`` (keyed as the paper's builder's parameters)."""
    if (env, fmt) not in LAYOUTS:
        have = ", ".join(f"--env {e} --format {f}" for e, f in LAYOUTS)
        raise ValueError(f"no {fmt!r} layout for {env!r} here (available: {have})")
    required, build = LAYOUTS[env, fmt]
    missing = [k for k in required if k not in step]
    if missing:
        raise ValueError(f"the step has no {', '.join(missing)} (a {env} {fmt} step needs {', '.join(required)})")
    return build(step)


@dataclass
class WMPromptConfig:
    env: str = option(help="the env whose layout to build", choices=sorted({e for e, _ in LAYOUTS}))
    format: str = option(help="the layout", choices=("paper",))
    step: str = option(help="a JSON file with the builder's inputs (above)")


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.envs.wm_prompt") -> int:
    parsed = ConfigCLI(WMPromptConfig, prog=prog, description=__doc__.split("\n\n")[0],
                       epilog=__doc__.split("\n\n", 2)[2], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    try:
        step = json.loads(Path(args.step).read_text())
        if not isinstance(step, dict):
            raise ValueError("must hold a JSON object")
        messages = step_messages(args.env, args.format, step)
    except (OSError, ValueError) as exc:
        print(f"error: --step {args.step}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"messages": messages}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
