"""ALFWorld as a :class:`~textwm.envs.contract.SimEpisode`: tracker + local responder + WM prompt + outcome.

The world model sees (the same text as its training rows, :func:`wm_query_of`):

* system — the scene in the paper's ``wm_system_prompt`` format (task, goal predicates, initial scene,
  initial object locations);
* state — what changed since the start and the last :data:`HISTORY_STEPS` steps::

      Location: cabinet 3
      Holding: mug 1
      Changed: mug 1 taken from cabinet 3; apple 2 in fridge 1; apple 2 is cool; desklamp 1 on
      Recent steps:
      > open cabinet 3
      You open the cabinet 3. The cabinet 3 is open. In it, you see a mug 1.

The agent's next user message carries the admissible commands the tracker computes (the real game's
list wherever the state is known; none where it is not, so the agent can still act).

``ALFWORLD_WM_PROMPT=paper`` queries in the paper's layout instead (:mod:`~textwm.envs.alfworld.paper_prompt`): the
system prompt rebuilt from the scene and the agent's conversation, the state the conversation as JSON (the
episode keeps it: the start messages, then ``Action: <action>`` and each user message it answered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.alfworld import agent, paper_prompt
from textwm.envs.alfworld.lenient import canonical_action
from textwm.envs.alfworld.responder import NOTHING_HAPPENS, known_frame, respond
from textwm.envs.alfworld.reward import episode_outcome
from textwm.envs.alfworld.scene import Scene
from textwm.envs.alfworld.tracker import MIDDLE, Tracker
from textwm.envs.contract import Outcome, WMQuery

HISTORY_STEPS = 4
#: WM prompt layouts: ``scene`` (the module docstring) and ``paper``.
LAYOUTS = ("scene", "paper")


def state_text(t: Tracker, history: list[tuple[str, str]]) -> str:
    """The ``state`` of a WM query (see the module docstring)."""
    changed = []
    for obj, start in t.scene.objects.items():
        now = t.where.get(obj)
        if obj == t.holding:
            changed.append(f"{obj} taken from {start}")
        elif now is not None and now != start:
            changed.append(f"{obj} in {now}")
    changed += [f"{obj} is {' and '.join(sorted(s))}" for obj, s in sorted(t.states.items()) if s]
    changed += [f"{lamp} on" for lamp in sorted(t.toggled)]
    opened_now = sorted(r for r in t.opened if not t.scene.receptacle(r).opened)
    changed += [f"{r} open" for r in opened_now]
    lines = [f"Location: {'middle of the room' if t.location is MIDDLE else t.location}",
             f"Holding: {t.holding or 'nothing'}", f"Changed: {'; '.join(changed) or 'nothing'}", "Recent steps:"]
    for action, observation in history[-HISTORY_STEPS:]:
        lines += [f"> {action}", observation]
    if not history:
        lines.append("(none)")
    return "\n".join(lines)


def wm_query_of(t: Tracker, history: list[tuple[str, str]], action: str) -> WMQuery:
    return WMQuery(system_prompt=t.scene.wm_system_prompt(), state=state_text(t, history), action=action)


@dataclass
class AlfWorldEpisode:
    tracker: Tracker
    #: Agent actions in order (None for an unparseable reply).
    actions: list[str | None] = field(default_factory=list)
    observations: list[str | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    layout: str = "scene"
    #: The agent's conversation so far (paper layout only: it is that layout's state).
    conversation: list[dict[str, str]] = field(default_factory=list)
    #: Read commands as the paper's plugin did (:mod:`~textwm.envs.alfworld.lenient`): ``put X in Y``, ``take X``.
    lenient: bool = False

    @classmethod
    def start(cls, scene: Scene, messages: Sequence[Mapping[str, Any]] = (), layout: str = "scene",
              lenient: bool = False) -> AlfWorldEpisode:
        if layout not in LAYOUTS:
            raise ValueError(f"unknown ALFWorld WM prompt layout {layout!r}; use one of {', '.join(LAYOUTS)}")
        if layout == "paper" and not messages:
            raise ValueError("the paper's WM prompt needs the agent's start messages (its state is the conversation)")
        conversation = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        return cls(tracker=Tracker.start(scene), layout=layout, conversation=conversation if layout == "paper" else [],
                   lenient=lenient)

    def _read(self, action: str) -> str:
        return canonical_action(self.tracker, action) if self.lenient else action

    def history(self) -> list[tuple[str, str]]:
        return [(a, o) for a, o in zip(self.actions, self.observations) if a is not None and o is not None]

    # --- SimEpisode protocol --------------------------------------------------------------------------

    def local_answer(self, action: str) -> str | None:
        return respond(self.tracker, self._read(action))

    def known_frame(self, action: str) -> list | None:
        """The text the state decides around an unknown receptacle's listing, as a template (the simulator sends
        it with ``$ALFWORLD_WM_ANCHORS=1``: :func:`~textwm.envs.alfworld.responder.known_frame`)."""
        return known_frame(self.tracker, self._read(action))

    def wm_query(self, action: str) -> WMQuery:
        action = self._read(action)
        if self.layout == "paper":
            conversation = [*self.conversation, {"role": "assistant", "content": agent.format_reply(action)}]
            return WMQuery(system_prompt=paper_prompt.system_prompt(self.tracker.scene.wm_system_prompt(),
                                                                    conversation, action),
                           state=paper_prompt.user_state(conversation), action=action)
        return wm_query_of(self.tracker, self.history(), action)

    def observe(self, action: str, observation: str, source: str) -> None:
        action = self._read(action)
        self.tracker.observe(action, observation)
        self.actions.append(action)
        self.observations.append(observation)
        self.sources.append(source)
        if self.layout == "paper":
            self.conversation += [{"role": "assistant", "content": agent.format_reply(action)},
                                  {"role": "user", "content": self.agent_message(observation)}]

    def agent_message(self, observation: str) -> str:
        return agent.user_turn(observation, self.tracker.admissible() or [])

    def fallback_observation(self, action: str) -> str:
        """The paper's substitute for every failed answer."""
        return NOTHING_HAPPENS

    def unparseable(self) -> None:
        self.actions.append(None)
        self.observations.append(None)

    def outcome(self) -> Outcome:
        return episode_outcome(self.tracker.scene.goal, self.actions, self.observations)

    def to_dict(self) -> dict[str, Any]:
        return {"tracker": self.tracker.to_dict(), "actions": list(self.actions),
                "observations": list(self.observations), "sources": list(self.sources), "layout": self.layout,
                "conversation": list(self.conversation), "lenient": self.lenient}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlfWorldEpisode:
        return cls(tracker=Tracker.from_dict(d["tracker"]), actions=list(d["actions"]),
                   observations=list(d["observations"]), sources=list(d["sources"]),
                   layout=str(d.get("layout", "scene")), conversation=list(d.get("conversation", ())),
                   lenient=bool(d.get("lenient", False)))
