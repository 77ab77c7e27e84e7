"""ALFWorld's goal check, termination and reward, from the trajectory alone (the paper's ``AlfworldReward``).

Everything is read from the observations, as the paper's plugin reads its messages, so it holds the
same for local and world-model answers: "You pick up the O from the R." (held), "You move the O to the
R." (placed), "You clean / heat / cool the O using the T.", "You turn on the T.".

* Goal per task type: ``look_at_obj_in_light`` — a target object held while a lamp of the toggle class is
  turned on; ``pick_two_obj_and_place`` — two distinct target instances placed in the destination class;
  ``pick_{clean,heat,cool}_then_place_in_recep`` — a placed target that was cleaned / heated / cooled;
  ``pick_and_place_simple`` — a target placed in the destination class.
* Termination: the goal (``success``); the same action three times in a row, ABAB, or at most 3 distinct
  actions among the last 20 (``loop``); 4 "Nothing happens." in a row (``stuck``); one unparseable reply
  (the paper ends the episode there; ``unparseable_streak``).
* Reward: a win scores ``min(1, penalty)``; otherwise partial credit — placing any object in the
  destination class 0.25 (0.35 with the target transformed), else lamp on + target taken 0.25, else the
  target taken 0.03, else -0.05 after 10 or more actions — times 0.3 when the last reply was unparseable,
  times the penalty, at most 0.9. The penalty: x0.7 for 3 identical actions in a row, x0.6 for 4
  "Nothing happens." in a row, x max(0.5, 1 - nothing_happens / actions). That is our reward and the
  paper's, but for one factor: the paper also multiplies an unwon episode's reward by 0.7 when its last
  reply has over 32 characters of prose before ``Action:`` (:func:`paper_reward`, ``reward: paper``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from textwm.envs.alfworld.scene import Goal, class_of
from textwm.envs.contract import Outcome

NOTHING = "Nothing happens."
REPEAT_LIMIT = 3
NOTHING_STREAK_LIMIT = 4
#: The paper's knobs of the two limits (its plugin and evaluation scripts read the same variables).
REPEAT_LIMIT_ENV, NOTHING_LIMIT_ENV = "ALFWORLD_LOOP_LIMIT", "ALFWORLD_NOTHING_LIMIT"
LOOP_WINDOW, LOOP_DISTINCT = 20, 3
UNPARSEABLE_LIMIT = 1
SUCCESS_SCORE = 1.0

_TAKE = re.compile(r"You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)\.")
_MOVE = re.compile(r"You move the ([a-z]+ \d+) to the ([a-z]+ \d+)\.")
_TRANSFORM = re.compile(r"You (clean|heat|cool) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.")
_TOGGLE = re.compile(r"You turn on the ([a-z]+ \d+)\.")


@dataclass
class Progress:
    """What the observations show about the goal."""

    held: set[str]
    placed: set[str]
    transformed: dict[str, set[str]]
    lit_with_target: bool
    took_target: bool
    placed_any_in_destination: bool
    toggled: bool

    @classmethod
    def of(cls, goal: Goal, observations: Sequence[str | None]) -> Progress:
        p = cls(set(), set(), {"clean": set(), "heat": set(), "cool": set()}, False, False, False, False)
        for obs in observations:
            if not obs:
                continue
            if (m := _TAKE.search(obs)) and class_of(m.group(1)) == goal.target:
                p.held.add(m.group(1))
                p.took_target = True
            if m := _MOVE.search(obs):
                obj, dest = m.group(1), m.group(2)
                p.held.discard(obj)
                if goal.destination and class_of(dest) == goal.destination:
                    p.placed_any_in_destination = True
                    if class_of(obj) == goal.target:
                        p.placed.add(obj)
            if m := _TRANSFORM.search(obs):
                p.transformed[m.group(1)].add(m.group(2))
            if (m := _TOGGLE.search(obs)) and (not goal.toggle or class_of(m.group(1)) == goal.toggle):
                p.toggled = True
                p.lit_with_target = p.lit_with_target or bool(p.held)
        return p

    def won(self, goal: Goal) -> bool:
        if goal.task_type == "look_at_obj_in_light":
            return self.lit_with_target
        if goal.task_type == "pick_two_obj_and_place":
            return len(self.placed) >= 2
        need = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
                "pick_cool_then_place_in_recep": "cool"}.get(goal.task_type)
        if need:
            return bool(self.placed & self.transformed[need])
        return bool(self.placed)

    def target_transformed(self, goal: Goal) -> bool:
        return any(class_of(o) == goal.target for objs in self.transformed.values() for o in objs)


def longest_run(flags: Sequence[bool]) -> int:
    best = run = 0
    for f in flags:
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def _limit(env_var: str, default: int) -> int:
    raw = os.environ.get(env_var, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 2:
        raise ValueError(f"${env_var}={raw!r}: an integer >= 2")
    return int(raw)


def repeat_limit() -> int:
    """Same action this many times in a row ends the episode (``$ALFWORLD_LOOP_LIMIT``, default 3)."""
    return _limit(REPEAT_LIMIT_ENV, REPEAT_LIMIT)


def nothing_limit() -> int:
    """This many "Nothing happens." in a row end the episode (``$ALFWORLD_NOTHING_LIMIT``, default 4)."""
    return _limit(NOTHING_LIMIT_ENV, NOTHING_STREAK_LIMIT)


def loop_detected(actions: Sequence[str]) -> bool:
    """AAA (``repeat_limit()`` in a row), ABAB, or at most 3 distinct actions among the last 20."""
    a, repeat = list(actions), repeat_limit()
    if len(a) >= repeat and len(set(a[-repeat:])) == 1:
        return True
    if len(a) >= 4 and a[-1] == a[-3] and a[-2] == a[-4] and a[-1] != a[-2]:
        return True
    return len(a) >= LOOP_WINDOW and len(set(a[-LOOP_WINDOW:])) <= LOOP_DISTINCT


def penalty(actions: Sequence[str], observations: Sequence[str | None]) -> float:
    factor = 1.0
    same = longest_run([x == y for x, y in zip(actions[1:], actions[:-1])]) + 1  # the longest run of one action
    if actions and same >= repeat_limit():
        factor *= 0.7
    nothing = [(o or "").strip() == NOTHING for o in observations]
    if longest_run(nothing) >= nothing_limit():
        factor *= 0.6
    if actions:
        factor *= max(0.5, 1.0 - sum(nothing) / len(actions))
    return factor


def episode_outcome(goal: Goal, actions: Sequence[str | None], observations: Sequence[str | None]) -> Outcome:
    """Score (1.0 won, else the partial credit), termination and the GRPO reward of a trajectory.

    ``actions`` has None for an unparseable reply (its observation is None)."""
    stepped = [a for a in actions if a is not None]
    seen = [o for a, o in zip(actions, observations) if a is not None]
    progress = Progress.of(goal, seen)
    factor = penalty(stepped, seen)
    unparseable_end = bool(actions) and actions[-1] is None
    if progress.won(goal):
        return Outcome(True, "success", SUCCESS_SCORE, reward=min(1.0, factor))
    if progress.placed_any_in_destination:
        credit = 0.35 if progress.target_transformed(goal) else 0.25
    elif progress.toggled and progress.took_target:
        credit = 0.25
    elif progress.took_target:
        credit = 0.03
    else:
        credit = -0.05 if len(stepped) >= 10 else 0.0
    reward = min(credit * (0.3 if unparseable_end else 1.0) * factor, 0.9)
    reason = None  # an unparseable reply ends the episode by the turn rules (UNPARSEABLE_LIMIT), not here
    if loop_detected(stepped):
        reason = "loop"
    elif longest_run([(o or "").strip() == NOTHING for o in seen[-nothing_limit():]]) >= nothing_limit():
        reason = "stuck"
    return Outcome(reason is not None, reason, credit, reward=reward)


#: The paper's format factor: prose longer than this before the ``Action:`` line of the last reply costs x0.7.
PROSE_LIMIT = 32
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ACTION_LINE = re.compile(r"^\s*Action\s*:", re.IGNORECASE | re.MULTILINE)


def prose_before_action(reply: str | None) -> bool:
    """The reply (think blocks dropped) has an ``Action:`` line with over :data:`PROSE_LIMIT` characters before it."""
    text = _THINK.sub("", reply or "").strip()
    m = _ACTION_LINE.search(text)
    return bool(m) and len(text[:m.start()].strip()) > PROSE_LIMIT


def paper_reward(outcome: Outcome, last_reply: str | None) -> float:
    """The paper's ALFWorld reward (``alfworld/alfworld_plugin.py``, ``AlfworldReward``): ours (the outcome's
    shaped reward), times 0.7 for an unwon episode whose last reply has prose before its action."""
    value = outcome.score if outcome.reward is None else outcome.reward
    if outcome.reason != "success" and prose_before_action(last_reply):
        value *= 0.7
    return min(value, 0.9) if outcome.reason != "success" else value


def reward_cases() -> list[tuple[str, Outcome, dict, str]]:
    """Built episodes of "put some mug in cabinet", one per outcome (:meth:`EnvSpec.reward_cases`)."""
    goal = Goal(task_type="pick_and_place_simple", text="put some mug in cabinet", target="mug", destination="cabinet")
    arrive = ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a cup 1, and a mug 1.")
    take = ("take mug 1 from countertop 1", "You pick up the mug 1 from the countertop 1.")
    take_cup = ("take cup 1 from countertop 1", "You pick up the cup 1 from the countertop 1.")
    to_cabinet = ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is open. In it, you see nothing.")
    look = ("look", "You are in the middle of a room. Looking quickly around you, you see a cabinet 1.")

    def case(name: str, steps: list[tuple[str | None, str | None]], why: str, last_reply: str | None = None):
        actions, observations = [a for a, _ in steps], [o for _, o in steps]
        last = last_reply if last_reply is not None else (f"Action: {actions[-1]}" if actions[-1] else "Hmm.")
        episode = {"actions": actions, "observations": observations, "last_reply": last}
        return name, episode_outcome(goal, actions, observations), episode, why

    rooms = [(f"go to drawer {i}", f"You arrive at drawer {i}. The drawer {i} is closed.") for i in range(1, 11)]
    return [
        case("success", [arrive, take, to_cabinet, ("move mug 1 to cabinet 1", "You move the mug 1 to the cabinet 1.")],
             "the most there is"),
        case("partial: another object placed", [arrive, take_cup, to_cabinet,
                                                ("move cup 1 to cabinet 1", "You move the cup 1 to the cabinet 1.")],
             "the right destination, short of the goal"),
        case("partial: the target taken", [arrive, take], "a first step of the task"),
        case("partial, prose before the action", [arrive, take], "the paper's format factor (x0.7)",
             last_reply="I can see the mug, so the next thing to do is pick it up.\nAction: take mug 1 from countertop 1"),
        case("nothing", [look], "no progress, no penalty"),
        case("wandering", rooms, "10 actions without progress: -0.05"),
        case("loop", [look] * 3, "ends the episode with nothing"),
        case("unparseable", [(None, None)], "ends the episode (the paper's rule: one unparseable reply)"),
    ]
