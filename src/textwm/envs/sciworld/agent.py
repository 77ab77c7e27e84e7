"""The agent side of ScienceWorld: the agent's prompt, action parsing, RL task rows and SFT demos.

RL task rows follow the paper's ``sciworld_rl_split`` format (``messages``, ``task_id``,
``instruction``, ``wm_system_prompt``, ``max_turns``) plus ``sim_task``: the baked start state the
simulator needs (room map, start observation, inventory, scoring goals), so a row is
self-sufficient. Rows are read by :meth:`textwm.envs.sciworld.spec.SciWorldSpec.load_row`;
the paper's released rows (no ``sim_task``) load as they are for the real env, and GRPO and in-WM
evaluation complete them first with a start state baked from the real env once and cached
(:mod:`textwm.envs.sim_cache`); their own ``messages`` stay the agent's conversation.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from textwm.envs.sciworld import paper_prompt
from textwm.envs.sciworld.tracker import EpisodeTracker, Task
from textwm.envs.sciworld.wm_prompt import wm_system_prompt

AGENT_SYSTEM_PROMPT = """\
You are an agent in ScienceWorld, a text environment of science experiments in 10 rooms.
Each turn, output exactly one action as plain text: no explanation, no markdown, no quotes.

Useful actions: look around, inventory, teleport to ROOM, go to ROOM, pick up OBJ, put down OBJ,
move OBJ to OBJ, open OBJ, close OBJ, activate OBJ, deactivate OBJ, pour OBJ in OBJ, mix OBJ,
use OBJ on OBJ, look at OBJ, read OBJ, wait, wait1, focus on OBJ.
Rooms: hallway, kitchen, outside, foundry, greenhouse, workshop, bedroom, living room, art studio, bathroom.

"focus on OBJ" tells the environment which object your task is about. Focusing on the wrong object
ends the task with a score of -100, so focus only when you are sure. When the environment lists
numbered choices ("Ambiguous request"), answer with the number."""

DEFAULT_MAX_TURNS = 50
_ACTION_PREFIX_RE = re.compile(r"^(?:action|command|>)\s*:?\s*", re.IGNORECASE)


def first_user_message(task: Task) -> str:
    return f"Task: {task.task_description}\n\n{task.initial_observation}"


def start_messages(task: Task) -> list[dict[str, str]]:
    """The agent's conversation before its first action: the system prompt and the task."""
    return [{"role": "system", "content": AGENT_SYSTEM_PROMPT}, {"role": "user", "content": first_user_message(task)}]


def rl_row(task: Task, *, max_turns: int = DEFAULT_MAX_TURNS) -> dict[str, Any]:
    """One RL task row (the paper's columns + ``sim_task``)."""
    tracker = EpisodeTracker(task)
    return {
        "messages": start_messages(task),
        "task_id": task.task_id,
        "instruction": task.task_description,
        "wm_system_prompt": (paper_prompt.baked_prompt(task) if task.prompt_style == "paper"
                             else wm_system_prompt(tracker, "look around")),
        "max_turns": max_turns,
        # A JSON string, like the paper's ``messages``: columnar loaders (datasets/Arrow) would
        # otherwise merge the room maps of different tasks into one struct type.
        "sim_task": json.dumps(asdict(task)),
    }


def sft_row(task: Task, steps: list[tuple[str, str]], final_score: float) -> dict[str, Any]:
    """An SFT demo: the agent prompt, then alternating actions and real observations."""
    messages = start_messages(task)
    for action, observation in steps:
        messages.append({"role": "assistant", "content": action})
        messages.append({"role": "user", "content": observation})
    if messages[-1]["role"] == "user" and len(messages) > 2:
        messages.pop()  # a demo ends with the agent's last action
    return {"messages": messages, "task_id": task.task_id, "instruction": task.task_description, "score": final_score}


def parse_action(text: str) -> str | None:
    """The action in an agent's reply, or None when there is none to execute.

    Think blocks and markup are removed; the first non-empty line is kept, a leading "Action:" or
    ">" dropped. Replies that are empty, very long (> 200 chars) or only a number other than a
    choice index (the env's numbered choices) are unparseable.
    """
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"<[^>]+>", "", text)
    lines = [line.strip().strip("\"'`") for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    action = _ACTION_PREFIX_RE.sub("", lines[0]).strip()
    if not action or len(action) > 200:
        return None
    return action
