"""The paper's AppWorld SFT demos (``appworld_sft_gpt_agent.jsonl``): agent tool calls with real AppWorld responses.

A demo row is ``{"messages": [system, user(instruction), assistant(call), user(<tool_response>), ...,
assistant(complete_task)], "task_id", "instruction"}`` (``messages`` a list or a JSON string). It has no
``wm_system_prompt``: the user's accounts are known from the demo's own
``supervisor__show_account_passwords`` response, which :func:`world_of_demo` reads.

:func:`responder_agreement` replays every demo through the local responder: for each call it answers,
its response against the real one (JSON-equal; an access token compared by its JWT subject, since a
token's signature and expiry are the real app's secret and clock), counted per rule (:func:`responder_rule`).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from textwm.data.jsonl import DataError
from textwm.data.schema import parse_messages
from textwm.envs.appworld import agent
from textwm.envs.appworld.responder import respond, track_login
from textwm.envs.appworld.reward import SHOW_PASSWORDS
from textwm.envs.appworld.world import World, parse_world


@dataclass(frozen=True)
class DemoStep:
    action: str
    response: str


@dataclass(frozen=True)
class Demo:
    task_id: str
    instruction: str
    messages: tuple[Mapping[str, str], ...]
    steps: tuple[DemoStep, ...]
    #: The final call (``supervisor__complete_task`` in the paper's demos), which has no response.
    final: str | None


def read_demo(row: Mapping[str, Any]) -> Demo:
    """A demo row; DataError naming the field or message when it is not one."""
    messages = parse_messages(row.get("messages"))
    task_id = row.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise DataError("demo row has no string 'task_id'", field="task_id")
    turns = [m for m in messages if m["role"] in ("assistant", "user")][1:]  # after the instruction
    steps, final = [], None
    for i in range(0, len(turns), 2):
        call = agent.parse_action(turns[i]["content"]) if turns[i]["role"] == "assistant" else None
        if call is None:
            raise DataError(f"message {i + 2} of demo {task_id!r} is not an assistant tool call", field="messages")
        if i + 1 == len(turns):
            final = call
        else:
            steps.append(DemoStep(call, agent.unwrap_tool_response(turns[i + 1]["content"])))
    return Demo(task_id, str(row.get("instruction") or ""), tuple(messages), tuple(steps), final)


def world_of_demo(demo: Demo) -> World:
    """The accounts the demo's passwords response shows, as a world (no records: the demo has none)."""
    for step in demo.steps:
        name, _ = agent.action_call(step.action)
        if name == SHOW_PASSWORDS:
            accounts = json.loads(step.response)
            email = accounts[0]["username"] if accounts else ""  # no accounts: parse_world refuses it below
            lines = [f"User identity: (unknown), email: {email}, phone: unknown", "", "Account credentials:"]
            lines += [f"- {a['app']}: username={a['username']}, password={a['password']}" for a in accounts]
            lines += ["", f"Active task: {demo.instruction}", ""]
            return parse_world("\n".join(lines), instruction=demo.instruction)
    raise DataError(f"demo {demo.task_id!r} never calls {SHOW_PASSWORDS}: its accounts are unknown")


def responder_rule(name: str, answer: str) -> str:
    """Which of the responder's rules gave ``answer`` (for per-rule counts)."""
    if name == SHOW_PASSWORDS:
        return "passwords"
    for marker, rule in (('"access_token"', "login"), ("Invalid credentials", "wrong_login"),
                         ("No API named", "unknown_api"), ("No app named", "unknown_app"),
                         ("status code is 401", "not_logged_in"), ("status code is 422", "missing_arguments"),
                         ("Marked the active task complete", "complete_task")):
        if marker in answer:
            return rule
    return "other"


def _token_subject(token: str) -> str | None:
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def same_response(ours: str, real: str) -> bool:
    """JSON-equal, with ``access_token`` values compared by their JWT subject."""
    try:
        a, b = json.loads(ours), json.loads(real)
    except json.JSONDecodeError:
        return ours.strip() == real.strip()
    if isinstance(a, dict) and isinstance(b, dict) and "access_token" in a and "access_token" in b:
        a, b = dict(a), dict(b)
        a["access_token"], b["access_token"] = _token_subject(a["access_token"]), _token_subject(b["access_token"])
    return a == b


@dataclass
class Agreement:
    """The responder over real responses: how many calls it answers, how many of those agree, per rule."""

    calls: int = 0
    answered: int = 0
    agreed: int = 0
    #: The passwords call: answered from the accounts the same response shows (agreement by construction).
    by_construction: int = 0
    per_rule: Counter = field(default_factory=Counter)
    disagreements: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "answered": self.answered, "agreed": self.agreed,
                "coverage": self.answered / self.calls if self.calls else 0.0,
                "agreement": self.agreed / self.answered if self.answered else 1.0,
                "by_construction": self.by_construction, "per_rule": dict(self.per_rule.most_common()),
                "disagreements": self.disagreements[:20]}


def responder_agreement(demos: Iterable[Demo]) -> Agreement:
    """Replay each demo; count the calls the responder answers and whether it agrees with the real response."""
    result = Agreement()
    for demo in demos:
        world = world_of_demo(demo)
        logged_in: list[str] = []
        for step in demo.steps:
            name, arguments = agent.action_call(step.action)
            result.calls += 1
            ours = respond(world, logged_in, name, arguments)
            if ours is not None:
                result.answered += 1
                if name == SHOW_PASSWORDS:
                    result.by_construction += 1
                if same_response(ours, step.response):
                    result.agreed += 1
                    result.per_rule[responder_rule(name, ours)] += 1
                else:
                    result.disagreements.append({"task_id": demo.task_id, "action": step.action, "ours": ours,
                                                 "real": step.response})
            track_login(logged_in, name, step.response)
    return result
