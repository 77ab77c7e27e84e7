"""ScienceWorld as a :class:`~textwm.envs.contract.SimEpisode`: tracker + responder + WM prompt + score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.contract import Outcome, WMQuery
from textwm.envs.sciworld import paper_prompt
from textwm.envs.sciworld.responder import known_frame, respond
from textwm.envs.sciworld.reward import Goals, episode_outcome
from textwm.envs.sciworld.tracker import EpisodeTracker, Task
from textwm.envs.sciworld.wm_prompt import wm_query_texts
from textwm.envs.sciworld.world import NO_MATCH, normalize_action


@dataclass
class SciWorldEpisode:
    tracker: EpisodeTracker
    #: Agent actions in order (None for an unparseable reply).
    actions: list[str | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: The agent's start messages (system, first user), kept for the paper's WM prompt only (its state is the
    #: agent's conversation).
    start_messages: list[dict[str, str]] = field(default_factory=list)
    #: Answer locally as the paper's plugin does (``$SCIWORLD_PAPER_RESPONDER=1``) instead of with the responder.
    paper_responder: bool = False

    @classmethod
    def start(cls, task: Task, messages: Sequence[Mapping[str, Any]] = (), *,
              paper_responder: bool = False) -> SciWorldEpisode:
        kept = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        return cls(tracker=EpisodeTracker(task), start_messages=kept if task.prompt_style == "paper" else [],
                   paper_responder=paper_responder)

    # --- SimEpisode protocol --------------------------------------------------------------------------

    def local_answer(self, action: str) -> str | None:
        if self.paper_responder:
            return paper_prompt.paper_response(self.tracker.task, self.tracker.history, action)
        return respond(self.tracker, action)

    def known_frame(self, action: str) -> list | None:
        """A look's known lines around the room's objects, as a template (sent with ``$SCIWORLD_WM_ANCHORS=1``:
        :func:`~textwm.envs.sciworld.responder.known_frame`)."""
        return known_frame(self.tracker, action)

    def wm_query(self, action: str) -> WMQuery:
        # The proxy builds the user message from state + action: the same text as the training rows.
        system, state, action_text = wm_query_texts(self.tracker, action, start_messages=self.start_messages)
        return WMQuery(system_prompt=system, state=state, action=action_text)

    def agent_message(self, observation: str) -> str:
        return observation

    def fallback_observation(self, action: str) -> str:
        """The paper's substitutes: a look gets the room's known listing, ``go to X`` a move, the rest a no-match."""
        a = normalize_action(action)
        if a.startswith("look around"):
            return (self.tracker.room_contents()
                    or f"This room is called the {self.tracker.room}. You look around but see nothing notable.")
        if a.startswith("go to "):
            return f"You move to the {a[len('go to '):]}."
        return NO_MATCH

    def observe(self, action: str, observation: str, source: str) -> None:
        self.actions.append(action)
        self.sources.append(source)
        self.tracker.observe(action, observation)

    def unparseable(self) -> None:
        """The agent's reply held no action (counted; the episode ends after a streak)."""
        self.actions.append(None)

    def observations(self) -> list[str]:
        return [o for _, o in self.tracker.history]

    def outcome(self) -> Outcome:
        return episode_outcome(self.actions, self.observations(), Goals.from_dict(self.tracker.task.goals))

    def to_dict(self) -> dict[str, Any]:
        return {"tracker": self.tracker.to_dict(), "actions": list(self.actions), "sources": list(self.sources),
                "start_messages": list(self.start_messages), "paper_responder": self.paper_responder}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SciWorldEpisode:
        return cls(tracker=EpisodeTracker.from_dict(d["tracker"]), actions=list(d["actions"]),
                   sources=list(d["sources"]), start_messages=list(d.get("start_messages", ())),
                   paper_responder=bool(d.get("paper_responder", False)))
