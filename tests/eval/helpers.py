"""Test doubles for the evaluation tests: scripted agents (ours), and scripted HTTP peers on loopback."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence

from tests.serving.scripted_http import ScriptedServer
from textwm.data.schema import parse_messages
from textwm.data.wm_message import split_wm_user_message
from textwm.eval.agents import AgentError, SimpleAgent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def turn(messages) -> int:
    """How many replies the agent has given in this conversation."""
    return sum(m["role"] == "assistant" for m in messages)


class GoldAgent(SimpleAgent):
    """Plays the gold actions of the task whose first user message opens the conversation (any env's rows);
    a start rebuilt from the real reset (ScienceWorld lists some rooms in a new order on every load) is
    matched by the row's instruction."""

    def __init__(self, rows: Sequence[dict], gold: dict[str, list[str]]):
        self.by_start = {parse_messages(r["messages"])[1]["content"]: gold[r["task_id"]] for r in rows}
        self.by_instruction = {r["instruction"]: gold[r["task_id"]] for r in rows if r.get("instruction")}
        self.seen: list[list[dict]] = []

    def _actions(self, first: str) -> list[str]:
        if first in self.by_start:
            return self.by_start[first]
        (actions,) = [a for text, a in self.by_instruction.items() if text in first]
        return actions

    def reply(self, messages) -> str:
        self.seen.append([dict(m) for m in messages])
        actions = self._actions(messages[1]["content"])
        n = turn(messages)
        return actions[n] if n < len(actions) else "look around"


class ScriptAgent(SimpleAgent):
    """Replies with ``script[turn]`` (the last one repeated); an AgentError in the script is raised."""

    def __init__(self, script: Sequence[str | AgentError]):
        self.script = list(script)
        self.seen: list[list[dict]] = []

    def reply(self, messages) -> str:
        self.seen.append([dict(m) for m in messages])
        item = self.script[min(turn(messages), len(self.script) - 1)]
        if isinstance(item, AgentError):
            raise item
        return item


def gold_actions(sft_rows: Sequence[dict]) -> dict[str, list[str]]:
    """task id -> the actions of its demonstration (the assistant turns of an SFT row)."""
    return {r["task_id"]: [m["content"] for m in parse_messages(r["messages"]) if m["role"] == "assistant"]
            for r in sft_rows}


class GoldWM:
    """A WM proxy on loopback that answers from real transitions (our test double of a perfect WM): the
    observation recorded for the same (state, action), else ``fallback(action)``, else a fixed refusal."""

    def __init__(self, wm_rows: Sequence[dict], fallback: Callable[[str], str | None] | None = None,
                 refusal: str = "No known action matches that input."):
        # Keyed by (state, action) and, where worlds share states (AppWorld: the world is in the system prompt),
        # by (system prompt, state, action) first.
        self.table = {split_wm_user_message(r["messages"][1]["content"]): r["messages"][2]["content"] for r in wm_rows}
        self.by_system = {(r["messages"][0]["content"], *split_wm_user_message(r["messages"][1]["content"])):
                          r["messages"][2]["content"] for r in wm_rows}
        self.fallback, self.refusal = fallback, refusal
        self.server = ScriptedServer(self._respond)
        self.url = self.server.url + "/"

    def _respond(self, method, path, body):
        if method == "GET":
            return 200, {"status": "ok"}, 0
        inp = body["input"]
        obs = self.by_system.get((inp.get("system_prompt"), inp["state"], inp["action"]))
        if obs is None:
            obs = self.table.get((inp["state"], inp["action"]))
        if obs is None and self.fallback is not None:
            obs = self.fallback(inp["action"])
        return 200, {"generated_text": obs or self.refusal, "usage": {}}, 0

    @property
    def requests(self):
        return self.server.requests

    def close(self) -> None:
        self.server.close()


def sciworld_focus(action: str) -> str | None:
    """ScienceWorld's answer to any focus action, for a GoldWM that must let wrong focuses happen."""
    return f"You focus on the {action[len('focus on '):]}." if action.startswith("focus on ") else None


class ChatServer:
    """An OpenAI-compatible endpoint on loopback: ``answer(messages) -> text`` (or an int: that HTTP status)."""

    def __init__(self, answer, model: str = "scripted"):
        self.answer, self.model = answer, model
        self.server = ScriptedServer(self._respond)
        self.url = self.server.url + "/v1"

    def _respond(self, method, path, body):
        if method == "GET" and path.endswith("/models"):
            return 200, {"data": [{"id": self.model}]}, 0
        text = self.answer(body["messages"])
        if isinstance(text, int):
            return text, {"error": {"message": "scripted failure"}}, 0
        return 200, {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                     "usage": {}}, 0

    @property
    def requests(self):
        return self.server.requests

    def close(self) -> None:
        self.server.close()


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]
