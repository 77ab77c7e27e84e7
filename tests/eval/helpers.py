"""Test doubles for the evaluation tests: scripted agents (ours), and scripted HTTP peers on loopback."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence

from tests.serving.scripted_http import ScriptedServer
from textwm.eval.agents import AgentError, SimpleAgent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def turn(messages) -> int:
    """How many replies the agent has given in this conversation."""
    return sum(m["role"] == "assistant" for m in messages)


class GoldAgent(SimpleAgent):
    """Plays the gold actions of the task whose description opens the conversation."""

    def __init__(self, rows: Sequence[dict], gold: dict[str, list[str]]):
        self.by_instruction = {r["instruction"]: gold[r["task_id"]] for r in rows}
        self.seen: list[list[dict]] = []

    def reply(self, messages) -> str:
        self.seen.append([dict(m) for m in messages])
        actions = next(a for text, a in self.by_instruction.items() if text in messages[1]["content"])
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


def gold_observations(wm_rows: Sequence[dict]) -> dict[tuple[str, str], str]:
    """(task description, action) -> the real observation, from gold transition rows."""
    table = {}
    for row in wm_rows:
        if row["source"] != "gold":
            continue
        state, action = row["messages"][1]["content"].rsplit("\n\nAction: ", 1)
        table[(state.removeprefix("State: ").split("\n", 1)[0], action)] = row["messages"][2]["content"]
    return table


class GoldWM:
    """A WM proxy on loopback that answers from the real gold transitions (our test double of a perfect WM):
    gold actions get the real observation, "focus on X" gets "You focus on the X.", anything else is rejected."""

    def __init__(self, wm_rows: Sequence[dict]):
        self.table = gold_observations(wm_rows)
        self.server = ScriptedServer(self._respond)
        self.url = self.server.url + "/"

    def _respond(self, method, path, body):
        if method == "GET":
            return 200, {"status": "ok"}, 0
        inp = body["input"]
        task = inp["state"].split("\n", 1)[0]
        obs = self.table.get((task, inp["action"]))
        if obs is None and inp["action"].startswith("focus on "):
            obs = f"You focus on the {inp['action'][len('focus on '):]}."
        return 200, {"generated_text": obs or "No known action matches that input.", "usage": {}}, 0

    def close(self) -> None:
        self.server.close()


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
