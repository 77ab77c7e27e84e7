"""ScienceWorld as a :class:`~textwm.envs.contract.SimEpisode`: tracker + responder + WM prompt + score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textwm.envs.contract import Outcome, WMQuery
from textwm.envs.sciworld.responder import respond
from textwm.envs.sciworld.reward import Goals, episode_outcome
from textwm.envs.sciworld.tracker import EpisodeTracker, Task
from textwm.envs.sciworld.wm_prompt import wm_state, wm_system_prompt


@dataclass
class SciWorldEpisode:
    tracker: EpisodeTracker
    #: Agent actions in order (None for an unparseable reply).
    actions: list[str | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, task: Task) -> SciWorldEpisode:
        return cls(tracker=EpisodeTracker(task))

    # --- SimEpisode protocol --------------------------------------------------------------------------

    def local_answer(self, action: str) -> str | None:
        return respond(self.tracker, action)

    def wm_query(self, action: str) -> WMQuery:
        # The proxy builds the user message from state + action: the same text as the training rows.
        return WMQuery(system_prompt=wm_system_prompt(self.tracker, action), state=wm_state(self.tracker), action=action)

    def agent_message(self, observation: str) -> str:
        return observation

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
        return {"tracker": self.tracker.to_dict(), "actions": list(self.actions), "sources": list(self.sources)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SciWorldEpisode:
        return cls(tracker=EpisodeTracker.from_dict(d["tracker"]), actions=list(d["actions"]),
                   sources=list(d["sources"]))
