import pytest

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
        ("activate stove", "The stove is now activated.", 73), ("wait", "You decide to wait for 10 iterations.", 80),
        ("look at water", "The water boils.", 100)]
MELT = [("focus on ice", "You focus on the ice.", 70), ("activate stove", "The stove is now activated.", 75),
        ("wait", "You decide to wait for 10 iterations.", 90), ("wait1", "You decide to wait for 1 iterations.", 100)]


def test_goals_from_the_gold_run():
    g = goals_from_gold(GOLD)
    assert g.focus_targets == {"water"}
    # the wait step raised the score but says nothing about progress: not a milestone
    assert g.milestones == (("you focus on the water.", 70.0, 1), ("the stove is now activated.", 73.0, 1),
                            ("the water boils.", 100.0, 1))
    assert g.final_wait_ticks is None
    assert Goals.from_dict(g.to_dict()) == g
    melt = goals_from_gold(MELT)
    assert melt.milestones == (("you focus on the ice.", 70.0, 1), ("the stove is now activated.", 75.0, 1))
    assert melt.final_wait_ticks == 11


def test_score_from_the_trajectory():
    g = goals_from_gold(GOLD)
    assert score_of([], [], g) == 0
    assert score_of(["focus on water", "x"], ["You focus on the water.", "Nothing happens."], g) == 70
    assert score_of(["focus on water", "look"], ["you   focus on the WATER.", "The water boils."], g) == 70  # skipped one
    assert score_of(["a", "b", "c"], ["You focus on the water.", "The stove is now activated.", "The water boils."],
                    g) == 100
    assert score_of(["activate stove"], ["The stove is now activated."], g) == 0   # out of order: no credit
    assert score_of(["focus on orange"], ["You focus on the orange."], g) == -100   # wrong focus
    assert score_of(["focus on orange"], ["You focus on the orange."], Goals()) == 0  # no goals: no penalty invented


def test_a_milestone_can_be_a_repeated_observation():
    gold = [("focus on seed", "You focus on the seed.", 40), ("deactivate sink", "The sink is now deactivated.", 40),
            ("water it", "You pour the water.", 40), ("deactivate sink", "The sink is now deactivated.", 90)]
    g = goals_from_gold(gold)
    assert g.milestones[-1] == ("the sink is now deactivated.", 90.0, 2)
    once = ["You focus on the seed.", "The sink is now deactivated."]
    assert score_of(["a", "b"], once, g) == 40
    assert score_of(["a", "b", "c", "b"], [*once, "You pour the water.", "The sink is now deactivated."], g) == 90


def test_waiting_alone_earns_nothing_but_completes_after_the_milestones():
    melt = goals_from_gold(MELT)
    wait = "You decide to wait for 10 iterations."
    assert score_of(["wait"] * 5, [wait] * 5, melt) == 0
    done = ["focus on ice", "activate stove", "wait", "wait1"]
    obs = ["You focus on the ice.", "The stove is now activated.", wait, "You decide to wait for 1 iterations."]
    assert score_of(done[:3], obs[:3], melt) == 75
    assert score_of(done, obs, melt) == 100


def test_loops_and_streaks():
    assert loop_detected(["a", "b", "b", "B "], ["o", "p", "p", "P"]) == "repeat"
    assert loop_detected(["x", "a", "b", "a", "b"], ["o", "p", "q", "p", "q"]) == "oscillation"
    assert loop_detected(["a", "b", "c", "a"], ["o"] * 4) is None
    # heating water: use thermometer / examine alternate while the reading changes -> progress, no loop
    assert loop_detected(["use t", "examine w", "use t", "examine w"],
                         ["20 degrees", "water", "35 degrees", "water"]) is None
    assert loop_detected(["wait1"] * 5, ["You decide to wait for 1 iterations."] * 5) is None
    assert trailing_streak([True, False, True, True]) == 2


def test_episode_outcome_and_reward():
    g = goals_from_gold(GOLD)
    assert episode_outcome(["focus on water", "activate stove", "look at water"],
                           ["You focus on the water.", "The stove is now activated.", "The water boils."], g) \
        == Outcome(True, "success", 100.0)
    wrong = episode_outcome(["focus on orange"], ["You focus on the orange."], g)
    assert wrong.reason == "wrong_focus" and reward(wrong) == -1.0
    assert episode_outcome([None, None, None], ["x", "y", "z"], g).reason == "unparseable_streak"
    streak = episode_outcome([f"bad {i}" for i in range(6)], [NO_MATCH] * 6, g)
    assert streak.reason == "invalid_streak" and reward(streak) == -0.1
    going = episode_outcome(["focus on water"], ["You focus on the water."], g)
    assert going == Outcome(False, None, 70.0) and reward(going) == 0.7


@pytest.mark.slow
def test_every_gold_run_is_a_success_under_the_trajectory_rules(real_env):
    """No termination rule cuts a gold run short, and its score from the trajectory alone is 100."""
    from textwm.envs.sciworld.env import task_catalog

    for task in sorted(task_catalog()):
        real_env.reset(f"{task}_v0", gold_path=True)
        steps = []
        for action in real_env.gold_actions():
            result = real_env.step(action)
            steps.append((action, result.observation, result.score))
            if result.done:
                break
        goals = goals_from_gold(steps)
        actions, observations = [a for a, _, _ in steps], [o for _, o, _ in steps]
        for i in range(1, len(steps)):
            outcome = episode_outcome(actions[:i], observations[:i], goals)
            assert not outcome.done, (task, i, outcome)
        assert episode_outcome(actions, observations, goals) == Outcome(True, "success", 100.0), task
