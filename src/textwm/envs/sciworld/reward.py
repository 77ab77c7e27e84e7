"""ScienceWorld score, reward and termination from the trajectory alone (no real env in the loop).

Goals come from the task's gold run in the real env (baked once with the task). Every gold step
that raised the score with an *informative* observation is a milestone ``(observation, score)``:
steps whose text is the same whatever the state (waiting, reading the task, rejected actions)
are not milestones, since repeating them would then earn reward (waiting, for instance,
raises the score only because something melts meanwhile). Arriving somewhere is informative: the real
env credits being in the right place (a lifespan task's outdoors), so "You move to the outside." and
"You teleport to the outside." are the milestone "you are in the outside". Milestones count in gold order. When the
gold run finished by waiting after its last milestone, the same number of ticks of waiting after
that milestone completes the task. The objects the gold run focused on are the accepted focus
targets; focusing on anything else is ScienceWorld's wrong focus (-100, episode over).

The GRPO reward (:func:`reward`) teaches the task rather than caution: success is 1, progress is the
score / 100, and a wrong focus keeps the progress made before it (it ends the episode, which costs the
rest): so trying never pays less than not trying, and a right focus pays more than a wrong one. A loop or
a streak keeps its progress minus 0.1 (wasted turns). :func:`paper_reward` is the paper's rule instead.
Termination rules end hopeless episodes early: the same action three times in a row, an A-B-A-B
oscillation, a streak of rejected actions or of unparseable replies. The paper's plugin also stops an episode
with fewer than 5 distinct actions among its last 20; that rule is not applied here, because measuring tasks
repeat their readings while time passes: it ends 34 of the 420 gold demos of ten task types (boil, the inclined
planes, melting points) before they succeed.

All functions are pure: lists of strings in, numbers and flags out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.contract import Outcome
from textwm.envs.sciworld.world import NO_MATCH, normalize_action

WRONG_FOCUS_SCORE = -100.0
SUCCESS_SCORE = 100.0
#: Consecutive rejected actions ("No known action matches that input.") that end an episode.
INVALID_STREAK_LIMIT = 6
#: Consecutive unparseable agent replies that end an episode.
UNPARSEABLE_STREAK_LIMIT = 3
_FOCUS_RE = re.compile(r"^You focus on the (.+)\.$")
#: First words of actions whose observation text is fixed whatever the world's state (so it cannot
#: witness progress): waiting, moving between rooms, reading the task.
UNINFORMATIVE_VERBS = frozenset({"wait", "wait1", "task"})
WAIT_TICKS = {"wait": 10, "wait1": 1}


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class Goals:
    """What scores in a task, from its gold run."""

    #: (normalised observation, score after it, its occurrence number in the gold run), in gold order:
    #: the second "The sink is now deactivated." of a gold run may score while the first did not.
    milestones: tuple[tuple[str, float, int], ...] = ()
    #: Objects the gold run focused on (``"You focus on the X."`` -> ``x``).
    focus_targets: frozenset[str] = field(default_factory=frozenset)
    #: Ticks the gold run waited after its last milestone to reach 100 (None: it did not need to).
    final_wait_ticks: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"milestones": [list(m) for m in self.milestones], "focus_targets": sorted(self.focus_targets),
                "final_wait_ticks": self.final_wait_ticks}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Goals:
        return cls(milestones=tuple((str(m[0]), float(m[1]), int(m[2]) if len(m) > 2 else 1)
                                    for m in d.get("milestones", ())),
                   focus_targets=frozenset(d.get("focus_targets", ())), final_wait_ticks=d.get("final_wait_ticks"))


_MOVE_RE = re.compile(r"^you (?:move|teleport|move through the door) to the (.+)\.$")


def milestone_text(observation: str) -> str:
    """The observation as milestones compare it: normalised, and an arrival as where the agent now is."""
    text = _norm(observation)
    m = _MOVE_RE.match(text)
    return f"you are in the {m.group(1)}" if m else text


#: Observations that are the same whatever the world's state.
CONSTANT_OBSERVATIONS = frozenset({NO_MATCH, "The door is already open."})


def informative(action: str, observation: str) -> bool:
    """Does this step's observation say something about task progress?"""
    verb = normalize_action(action).split(" ", 1)[0] if action else ""
    return observation.strip() not in CONSTANT_OBSERVATIONS and verb not in UNINFORMATIVE_VERBS


def goals_from_gold(steps: list[tuple[str, str, float]]) -> Goals:
    """Goals of a task from its gold run: ``steps`` = (action, observation, score after) in order."""
    milestones, focus, previous, waited = [], set(), 0.0, None
    seen: dict[str, int] = {}
    for action, observation, score in steps:
        m = _FOCUS_RE.match(observation.strip())
        if m:
            focus.add(_norm(m.group(1)))
        text = milestone_text(observation)
        seen[text] = seen.get(text, 0) + 1
        if score > previous and informative(action, observation):
            milestones.append((text, float(score), seen[text]))
            waited = 0 if score < SUCCESS_SCORE else None
        elif waited is not None:
            waited += WAIT_TICKS.get(normalize_action(action), 0)
        previous = max(previous, score)
    final_wait = waited if previous >= SUCCESS_SCORE and waited else None
    return Goals(milestones=tuple(milestones), focus_targets=frozenset(focus), final_wait_ticks=final_wait)


def focused_object(observation: str) -> str | None:
    m = _FOCUS_RE.match(observation.strip())
    return _norm(m.group(1)) if m else None


def score_of(actions: list[str | None], observations: list[str], goals: Goals) -> float:
    """Task score implied by the trajectory so far (-100 after a wrong focus).

    ``actions`` and ``observations`` are parallel (an unparseable reply has no observation and is
    skipped by the caller).
    """
    score, reached, waited = 0.0, 0, 0
    seen: dict[str, int] = {}
    for action, obs in zip(actions, observations):
        target = focused_object(obs)
        if target is not None and goals.focus_targets and target not in goals.focus_targets:
            return WRONG_FOCUS_SCORE
        text = milestone_text(obs)
        seen[text] = seen.get(text, 0) + 1
        if reached < len(goals.milestones) and text == goals.milestones[reached][0] \
                and seen[text] >= goals.milestones[reached][2]:
            score = goals.milestones[reached][1]
            reached += 1
            waited = 0
        elif reached == len(goals.milestones) and reached and goals.final_wait_ticks and obs != NO_MATCH:
            waited += WAIT_TICKS.get(normalize_action(action or ""), 0)
            if waited >= goals.final_wait_ticks:
                score = SUCCESS_SCORE
    return score


def loop_detected(actions: list[str], observations: list[str]) -> str | None:
    """``"repeat"`` (the same step 3x in a row) or ``"oscillation"`` (A B A B), else None.

    A step is an (action, observation) pair: alternating actions whose observations change (heating
    water while reading the thermometer) make progress and are no loop; waits are not counted.
    """
    steps = [(_norm(a), _norm(o)) for a, o in zip(actions, observations)
             if normalize_action(a) not in WAIT_TICKS]  # waiting again and again is how time passes
    if len(steps) >= 3 and steps[-1] == steps[-2] == steps[-3]:
        return "repeat"
    if len(steps) >= 4 and steps[-1] == steps[-3] and steps[-2] == steps[-4] and steps[-1] != steps[-2]:
        return "oscillation"
    return None


def trailing_streak(flags: list[bool]) -> int:
    n = 0
    for f in reversed(flags):
        if not f:
            break
        n += 1
    return n


def episode_outcome(actions: list[str | None], observations: list[str], goals: Goals) -> Outcome:
    """Is the episode over, why ("success", "wrong_focus", "repeat", "oscillation", "invalid_streak",
    "unparseable_streak"), and with which score. ``actions[i]`` is None for an unparseable reply."""
    parsed = [a for a in actions if a is not None]
    score = score_of(parsed, observations, goals)
    if score <= WRONG_FOCUS_SCORE:
        return wrong_focus(progress_before_wrong_focus(parsed, observations, goals))
    if score >= SUCCESS_SCORE:
        return Outcome(True, "success", score)
    if trailing_streak([a is None for a in actions]) >= UNPARSEABLE_STREAK_LIMIT:
        return Outcome(True, "unparseable_streak", score)
    loop = loop_detected(parsed, observations)
    if loop:
        return Outcome(True, loop, score)
    if trailing_streak([o == NO_MATCH for o in observations]) >= INVALID_STREAK_LIMIT:
        return Outcome(True, "invalid_streak", score)
    return Outcome(False, None, score)


def progress_before_wrong_focus(actions: list[str], observations: list[str], goals: Goals) -> float:
    """The score of the steps before the first wrong focus (0 when there is none)."""
    for i, obs in enumerate(observations):
        target = focused_object(obs)
        if target is not None and goals.focus_targets and target not in goals.focus_targets:
            return score_of(actions[:i], observations[:i], goals)
    return 0.0


def wrong_focus(progress: float) -> Outcome:
    """The end by a wrong focus, after ``progress`` (the score before it): the env's -100, and the progress kept
    as the reward's (:func:`reward`)."""
    return Outcome(True, "wrong_focus", WRONG_FOCUS_SCORE, reward=max(0.0, progress) / SUCCESS_SCORE)


def reward(outcome: Outcome) -> float:
    """GRPO reward in [-0.1, 1] (module docstring): the score / 100; a wrong focus keeps the progress before it;
    an episode ended by a loop or a streak keeps its score minus 0.1 (it wasted its turns)."""
    if outcome.reason == "wrong_focus":
        return outcome.reward if outcome.reward is not None else 0.0
    value = outcome.score / SUCCESS_SCORE
    if outcome.reason in ("repeat", "oscillation", "invalid_streak", "unparseable_streak"):
        value -= 0.1
    return max(-1.0, min(1.0, value))


def paper_loops(actions: list[str]) -> int:
    """The paper's loop count: every run of three equal actions (overlapping, so k in a row count k - 2) and
    every A B A B window with A != B."""
    triples = sum(actions[j] == actions[j - 1] == actions[j - 2] for j in range(2, len(actions)))
    abab = sum(actions[j] == actions[j - 2] and actions[j - 1] == actions[j - 3] and actions[j] != actions[j - 1]
               for j in range(3, len(actions)))
    return triples + abab


def paper_reward(score: float, actions: list[str]) -> float:
    """The paper's ScienceWorld GRPO reward (``sciworld/sciworld_plugin.py``, ``SciWorldReward``), on the episode's
    score and its parsed actions, in order:

    score / 100; a negative one becomes -0.2 at a score <= -50 (a wrong focus), else at least -0.1; no
    ``focus on`` in 10 or more actions caps it at -0.15; 2 or fewer actions and a negative reward: x1.5, at most
    -0.1; loops (:func:`paper_loops`, n > 0) multiply it by max(0.3, 1 - 0.15 n); clamped to [-0.2, 1]. No action:
    0. (Upstream's reward also counts the final reply's action a second time, the conversation holding it already;
    here each action counts once.)
    """
    if not actions:
        return 0.0
    value = score / SUCCESS_SCORE
    if value < 0:
        value = -0.2 if score <= -50 else max(value, -0.1)
    if len(actions) >= 10 and not any("focus on" in a.lower() for a in actions):
        value = min(value, -0.15)
    if len(actions) <= 2 and value < 0:
        value = min(value * 1.5, -0.1)
    loops = paper_loops(actions)
    if loops:
        value *= max(0.3, 1 - 0.15 * loops)
    return max(-0.2, min(1.0, value))


def reward_cases() -> list[tuple[str, Outcome, dict[str, Any], str]]:
    """Built episodes of a lifespan task (outdoors is credited 50, the right focus 100), one per outcome:
    ``(outcome, its Outcome, the episode's actions and observations, why its reward leads to the task)``."""
    goals = Goals(milestones=(("you are in the outside", 50.0, 1), ("you focus on the elephant.", 100.0, 1)),
                  focus_targets=frozenset({"elephant"}))
    out, kitchen = ("go to outside", "You move to the outside."), "This room is called the kitchen."

    def case(name: str, steps: list[tuple[str | None, str | None]], why: str):
        actions, observations = [a for a, _ in steps], [o for a, o in steps if a is not None]
        episode = {"actions": actions, "observations": [o for _, o in steps]}
        return name, episode_outcome(actions, observations, goals), episode, why

    return [
        case("success", [out, ("focus on elephant", "You focus on the elephant.")], "the most there is"),
        case("partial", [out], "what the real env credits, short of success"),
        case("nothing", [("look around", kitchen)], "no progress, no penalty"),
        case("wrong focus after progress", [out, ("focus on bee", "You focus on the bee.")],
             "keeps its progress: a focus never pays less than not focusing, and less than the right one"),
        case("wrong focus at once", [("focus on bee", "You focus on the bee.")], "as nothing"),
        case("loop", [("look around", kitchen)] * 3, "progress minus 0.1: wasted turns pay least"),
        case("unparseable", [(None, None)] * 3, "progress minus 0.1"),
    ]
