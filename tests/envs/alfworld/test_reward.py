"""ALFWorld's goal check, termination and shaped reward, from trajectories alone (pure functions)."""

from __future__ import annotations

import pytest

from textwm.envs.alfworld.reward import episode_outcome, loop_detected
from textwm.envs.alfworld.scene import Goal

HEAT = Goal("pick_heat_then_place_in_recep", "heat some apple and put it in cabinet", "apple", "cabinet")
TWO = Goal("pick_two_obj_and_place", "put two apple in sidetable", "apple", "sidetable")
LOOK = Goal("look_at_obj_in_light", "look at mug under the desklamp", "mug", toggle="desklamp")

TAKE = ("take apple 1 from fridge 1", "You pick up the apple 1 from the fridge 1.")
HEAT_IT = ("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")
PLACE = ("move apple 1 to cabinet 1", "You move the apple 1 to the cabinet 1.")
NOTHING = "Nothing happens."


def outcome(goal, steps):
    return episode_outcome(goal, [a for a, _ in steps], [o for _, o in steps])


def test_a_win_per_task_type():
    assert outcome(HEAT, [TAKE, HEAT_IT, ("go to cabinet 1", "You arrive at cabinet 1. ..."), PLACE]).reason == "success"
    two = [("take apple 1 from x 1", "You pick up the apple 1 from the x 1."),
           ("move apple 1 to sidetable 1", "You move the apple 1 to the sidetable 1."),
           ("take apple 2 from y 1", "You pick up the apple 2 from the y 1."),
           ("move apple 2 to sidetable 1", "You move the apple 2 to the sidetable 1.")]
    assert outcome(TWO, two[:2]).reason is None and outcome(TWO, two).reason == "success"
    look = [("take mug 1 from desk 1", "You pick up the mug 1 from the desk 1."),
            ("use desklamp 1", "You turn on the desklamp 1.")]
    assert outcome(LOOK, look).reason == "success" and outcome(LOOK, look[::-1]).reason is None
    won = outcome(HEAT, [TAKE, HEAT_IT, PLACE])
    assert won.done and won.score == 1.0 and won.reward == 1.0


def test_placing_without_the_transform_is_partial_credit():
    placed = outcome(HEAT, [TAKE, PLACE])
    assert not placed.done and placed.score == 0.25 and placed.reward == 0.25
    assert outcome(HEAT, [TAKE]).score == 0.03
    idle = outcome(HEAT, [("look", "You are in the middle of a room. ...")] * 2 + [("inventory", "x")] * 2)
    assert idle.score == 0.0


@pytest.mark.parametrize(("actions", "looped"), [(["a", "a", "a"], True), (["a", "b", "a", "b"], True),
                                             (["a", "b", "c"] * 7, True), (["a", "b", "c", "d"], False)])
def test_loops(actions, looped):
    assert loop_detected(actions) is looped


def test_a_nothing_happens_streak_ends_the_episode_and_costs_reward():
    steps = [TAKE] + [(f"bad {i}", NOTHING) for i in range(4)]
    out = outcome(HEAT, steps)
    assert out.done and out.reason == "stuck"
    assert out.reward == pytest.approx(0.03 * 0.6 * 0.5)  # streak penalty, then max(0.5, 1 - 4/5)


def test_an_unparseable_last_reply_scales_the_credit():
    out = episode_outcome(HEAT, [TAKE[0], PLACE[0], None], [TAKE[1], PLACE[1], None])
    assert out.score == 0.25 and out.reward == pytest.approx(0.25 * 0.3)
