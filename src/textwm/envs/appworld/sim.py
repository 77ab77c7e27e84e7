"""AppWorld as a :class:`~textwm.envs.contract.SimEpisode`: the row's world, the apps logged in to, the calls.

The local responder (:mod:`~textwm.envs.appworld.responder`) answers what the world decides; the world
model the rest (:mod:`~textwm.envs.appworld.wm_prompt`, in the episode's layout). A world-model answer that is
not JSON reaches the agent as it is and is counted (``malformed``); the reward scores it as a failed call.
``$APPWORLD_PAPER_RESPONDER=1`` answers as the paper's plugin does instead where it can
(:func:`~textwm.envs.appworld.paper_prompt.paper_response`: list / search / show calls from the row's records,
a canned success for writes): that changes what the agent is told (the records are the start's, a write changes
nothing), so it is off unless asked for; so is ``$APPWORLD_WM_JSON_REPAIR=1``, the paper's repair of world-model
answers (``json_repair``; prose comes out as ``""``), still counted as malformed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.appworld import agent, paper_prompt
from textwm.envs.appworld.calls import THINK
from textwm.envs.appworld.responder import known_frame, respond, track_login
from textwm.envs.appworld.reward import episode_outcome, rules_of
from textwm.envs.appworld.wm_prompt import wm_query
from textwm.envs.appworld.world import World
from textwm.envs.contract import Outcome, WMQuery

log = logging.getLogger(__name__)


#: The tool response that stands in for a failed world-model answer (the paper's wording).
WM_FAILED = '{"error": "WM request failed"}'


def clean_response(text: str) -> str:
    """A response as the agent gets it: think blocks and ``<tool_response>`` tags of a WM answer dropped."""
    return agent.unwrap_tool_response(THINK.sub("", text or "").strip())


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


@dataclass
class AppWorldEpisode:
    world: World
    logged_in: list[str] = field(default_factory=list)
    #: Canonical calls in order (None for an unparseable reply) and their responses.
    actions: list[str | None] = field(default_factory=list)
    observations: list[str | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: World-model responses that were not JSON.
    malformed: int = 0
    #: The WM prompt layout (:data:`~textwm.envs.appworld.wm_prompt.LAYOUTS`).
    layout: str = "ours"
    #: The agent's start messages (system, task): the start of the paper layout's state.
    start_messages: list[dict[str, Any]] = field(default_factory=list)
    #: Answer as the paper's plugin does where it can (``$APPWORLD_PAPER_RESPONDER=1``).
    paper_responder: bool = False
    #: Repair world-model answers as the paper's plugin does (``$APPWORLD_WM_JSON_REPAIR=1``;
    #: :func:`~textwm.envs.appworld.paper_prompt.repair_wm_answer`); a malformed answer is counted either way.
    wm_json_repair: bool = False

    @classmethod
    def start(cls, world: World, *, layout: str = "ours", start_messages: Any = (), paper_responder: bool = False,
              wm_json_repair: bool = False) -> AppWorldEpisode:
        return cls(world=world, layout=layout, start_messages=[dict(m) for m in start_messages],
                   paper_responder=paper_responder, wm_json_repair=wm_json_repair)

    def history(self) -> list[tuple[str, str]]:
        return [(a, o) for a, o in zip(self.actions, self.observations) if a is not None and o is not None]

    # --- SimEpisode protocol --------------------------------------------------------------------------

    def local_answer(self, action: str) -> str | None:
        name, arguments = agent.action_call(action)
        if self.paper_responder and name != "supervisor__show_account_passwords":
            return paper_prompt.paper_response(self.world.text, name, paper_prompt.wm_arguments(arguments),
                                               self.logged_in)
        return respond(self.world, self.logged_in, name, arguments)

    def known_frame(self, action: str) -> list | None:
        """The response's fixed JSON around what the world model fills, as a template (sent with
        ``$APPWORLD_WM_ANCHORS=1``: :func:`~textwm.envs.appworld.responder.known_frame`)."""
        name, arguments = agent.action_call(action)
        return known_frame(self.world, self.logged_in, name, arguments)

    def wm_query(self, action: str) -> WMQuery:
        return wm_query(self.world, self.logged_in, self.history(), action, layout=self.layout,
                        start_messages=self.start_messages)

    def observe(self, action: str, observation: str, source: str) -> None:
        raw, observation = observation, clean_response(observation)
        if source != "local" and not is_json(observation):
            self.malformed += 1
            log.warning("AppWorld: the world model's answer to %s is not JSON (%d in this episode; %s): %r",
                        action[:120], self.malformed, "repaired as the paper does" if self.wm_json_repair
                        else "scored as a failed call", observation[:200])
        if source != "local" and self.wm_json_repair:
            observation = paper_prompt.repair_wm_answer(raw)
        track_login(self.logged_in, agent.action_call(action)[0], observation)
        self.actions.append(action)
        self.observations.append(observation)
        self.sources.append(source)

    def agent_message(self, observation: str) -> str:
        # Called for the step just observed: a repaired world-model answer reaches the agent as repaired.
        repaired = self.wm_json_repair and self.sources and self.sources[-1] not in ("local", "feedback")
        return agent.tool_response_message(self.observations[-1] if repaired else clean_response(observation))

    def fallback_observation(self, action: str) -> str:
        """The paper's substitute: an error body, which the agent reads as a failed call."""
        return WM_FAILED

    def unparseable(self) -> None:
        self.actions.append(None)
        self.observations.append(None)
        self.sources.append("feedback")

    def outcome(self) -> Outcome:
        return episode_outcome(rules_of(self.world), self.actions, self.observations)

    def to_dict(self) -> dict[str, Any]:
        return {"world": self.world.to_dict(), "logged_in": list(self.logged_in), "actions": list(self.actions),
                "observations": list(self.observations), "sources": list(self.sources), "malformed": self.malformed,
                "layout": self.layout, "start_messages": [dict(m) for m in self.start_messages],
                "paper_responder": self.paper_responder, "wm_json_repair": self.wm_json_repair}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AppWorldEpisode:
        return cls(world=World.from_dict(d["world"]), logged_in=list(d["logged_in"]), actions=list(d["actions"]),
                   observations=list(d["observations"]), sources=list(d["sources"]), malformed=int(d["malformed"]),
                   layout=d.get("layout", "ours"), start_messages=list(d.get("start_messages") or []),
                   paper_responder=bool(d.get("paper_responder", False)),
                   wm_json_repair=bool(d.get("wm_json_repair", False)))
