"""The one episode loop: the turn rules that RL rollouts and evaluation episodes share.

A :class:`Trajectory` is one episode as the agent plays it, plain data (``to_dict`` / ``from_dict``,
so it can travel with an ms-swift request). Each turn is:

1. :meth:`Trajectory.reply` records the agent's reply and returns its action (the env's parser), or
   None for an unparseable reply;
2. the caller answers the action (real env, or the Simulator) and calls :meth:`Trajectory.stepped`,
   or, for an unparseable reply, tells the env and calls :meth:`Trajectory.skipped` (the env is not
   stepped and the agent is told what a valid action looks like, never something that passes for an
   observation);
3. the trajectory decides whether the episode is over, in this order: a failed step (``wm_error``,
   ``env_error``), the env's own end (its outcome's reason: ``success``, ``wrong_focus``, a loop, ...),
   ``unparseable_limit`` unparseable replies in a row (``unparseable_streak``), the turn limit
   (``max_turns``); else :attr:`Trajectory.pending` is the next user message.

Failures before a turn (the agent could not reply) end the episode with :meth:`Trajectory.fail`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from textwm.envs.contract import EnvSpec, Outcome

#: Source of a turn whose user message is the format hint after an unparseable reply.
FEEDBACK = "feedback"
#: End reasons the loop itself gives (beside the env's own).
MAX_TURNS, UNPARSEABLE_STREAK, ENV_DONE = "max_turns", "unparseable_streak", "env_done"
#: End reasons that are failures (counted apart; the episode did not succeed).
FAILURE_REASONS = ("agent_error", "env_error", "wm_error")


@dataclass(frozen=True)
class TurnRules:
    """How replies are read: the env's parser, its format hint, its streak limit."""

    parse: Callable[[str], str | None]
    hint: str
    unparseable_limit: int

    @classmethod
    def of(cls, spec: EnvSpec) -> TurnRules:
        return cls(spec.parse_action, spec.invalid_reply_hint, spec.unparseable_limit)


@dataclass(frozen=True)
class Step:
    """The answer to one action."""

    observation: str | None
    #: The env's outcome after the step (score so far; done with a reason when the env ended the episode).
    outcome: Outcome
    #: Who answered: ``local`` / ``wm`` (simulator), None (the real env).
    source: str | None = None
    #: Set when the step failed; the episode ends with ``failure``.
    error: str | None = None
    failure: str = "env_error"
    #: The agent's next user message when it is more than the observation (ALFWorld: the observation and
    #: the admissible commands); None: the observation itself.
    message: str | None = None
    #: What the env reported beside the observation (the real env's step info: admissible commands, ...).
    info: Mapping[str, Any] = field(default_factory=dict)
    #: The world model filled a template of what the responder knew (an anchored request).
    anchored: bool = False


@dataclass
class Trajectory:
    task_id: str
    #: Agent turns at most (None: no limit of its own).
    max_turns: int | None = None
    #: One entry per turn: the parsed action (None: unparseable reply), the observation, the score after
    #: it (None where the env was not stepped), who answered.
    actions: list[str | None] = field(default_factory=list)
    observations: list[str | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    outcome: Outcome = field(default_factory=lambda: Outcome(False, None, 0.0))
    unparseable: int = 0
    streak: int = 0
    finished: bool = False
    #: The env itself ended the episode (its outcome was done), as opposed to a cut-off or a failure.
    env_ended: bool = False
    end_reason: str | None = None
    error: str | None = None
    #: The next user message for the agent (observation or format hint); None once finished.
    pending: str | None = None

    @property
    def turns(self) -> int:
        return len(self.replies)

    @property
    def score(self) -> float:
        return self.outcome.score

    def reply(self, text: str, rules: TurnRules) -> str | None:
        """Record the agent's reply; its action, or None (unparseable: call :meth:`skipped` next)."""
        if self.finished:
            raise RuntimeError(f"episode {self.task_id!r} already ended ({self.end_reason}); no more turns")
        self.replies.append(text)
        self.pending = None
        action = rules.parse(text)
        if action is None:
            self.unparseable += 1
            self.streak += 1
        else:
            self.streak = 0
        return action

    def stepped(self, action: str, step: Step) -> None:
        """The env's answer to ``action``; decides whether the episode is over."""
        self._record(action, step.observation, None if step.error else step.outcome.score, step.source)
        self.outcome = step.outcome
        if step.error is not None:
            self.finish(step.failure, error=step.error)
        else:
            self._after_turn(step.message if step.message is not None else step.observation or "", None)

    def skipped(self, rules: TurnRules, outcome: Outcome | None = None) -> None:
        """After an unparseable reply: nothing stepped; ``outcome``: the env's, if telling it changed it."""
        self._record(None, None, None, FEEDBACK)
        if outcome is not None:
            self.outcome = outcome
        self._after_turn(rules.hint, rules)

    def fail(self, reason: str, error: str) -> None:
        """The turn could not happen (the agent failed): the episode ends without recording a turn."""
        self.finish(reason, error=error)

    def finish(self, reason: str, *, error: str | None = None, env_ended: bool = False) -> None:
        self.finished, self.end_reason, self.error, self.env_ended, self.pending = True, reason, error, env_ended, None

    def _record(self, action: str | None, observation: str | None, score: float | None, source: str | None) -> None:
        self.actions.append(action)
        self.observations.append(observation)
        self.scores.append(score)
        self.sources.append(source)

    def _after_turn(self, message: str, rules: TurnRules | None) -> None:
        if self.outcome.done:
            self.finish(self.outcome.reason or ENV_DONE, env_ended=True)
        elif rules is not None and self.streak >= rules.unparseable_limit:
            self.finish(UNPARSEABLE_STREAK)
        elif self.max_turns is not None and self.turns >= self.max_turns:
            self.finish(MAX_TURNS)
        else:
            self.pending = message

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trajectory:
        d = dict(d)
        d["outcome"] = Outcome.from_dict(d["outcome"])
        return cls(**d)
