from textwm.envs.sciworld.reward import (
    Goals,
    Outcome,
    episode_outcome,
    goals_from_gold,
    loop_detected,
    reward,
    score_of,
    trailing_streak,
)
from textwm.envs.sciworld.world import NO_MATCH

GOLD = [("open door to kitchen", "The door is now open.", 0), ("focus on water", "You focus on the water.", 70),
        ("activate stove", "The stove is now activated.", 73), ("wait", "You decide to wait for 10 iterations.", 73),
        ("look at water", "The water boils.", 100)]


def test_goals_from_the_gold_run():
    g = goals_from_gold(GOLD)
    assert g.focus_targets == {"water"}
    assert g.milestones == (("you focus on the water.", 70.0), ("the stove is now activated.", 73.0),
                            ("the water boils.", 100.0))
    assert Goals.from_dict(g.to_dict()) == g


def test_score_from_observations():
    g = goals_from_gold(GOLD)
    assert score_of([], g) == 0
    assert score_of(["You focus on the water.", "Nothing happens."], g) == 70
    assert score_of(["you   focus on the WATER.", "The water boils."], g) == 100
    assert score_of(["You focus on the orange."], g) == -100            # wrong focus
    assert score_of(["You focus on the orange."], Goals()) == 0         # no goals known: no penalty invented


def test_loops_and_streaks():
    assert loop_detected(["a", "b", "b", "B "]) == "repeat"
    assert loop_detected(["x", "a", "b", "a", "b"]) == "oscillation"
    assert loop_detected(["a", "b", "c", "a"]) is None
    assert trailing_streak([True, False, True, True]) == 2


def test_episode_outcome_and_reward():
    g = goals_from_gold(GOLD)
    assert episode_outcome(["focus on water", "look at water"], ["You focus on the water.", "The water boils."], g) \
        == Outcome(True, "success", 100.0)
    wrong = episode_outcome(["focus on orange"], ["You focus on the orange."], g)
    assert wrong.reason == "wrong_focus" and reward(wrong) == -1.0
    assert episode_outcome([None, None, None], ["x", "y", "z"], g).reason == "unparseable_streak"
    streak = episode_outcome([f"bad {i}" for i in range(6)], [NO_MATCH] * 6, g)
    assert streak.reason == "invalid_streak" and reward(streak) == -0.1
    going = episode_outcome(["focus on water"], ["You focus on the water."], g)
    assert going == Outcome(False, None, 70.0) and reward(going) == 0.7
