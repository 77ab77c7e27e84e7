import pytest

from textwm.envs.sciworld.reward import (
    Goals,
    Outcome,
    episode_outcome,
    goals_from_gold,
    loop_detected,
    paper_loops,
    paper_reward,
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
    assert wrong.reason == "wrong_focus" and wrong.score == -100 and reward(wrong) == 0.0
    assert episode_outcome([None, None, None], ["x", "y", "z"], g).reason == "unparseable_streak"
    streak = episode_outcome([f"bad {i}" for i in range(6)], [NO_MATCH] * 6, g)
    assert streak.reason == "invalid_streak" and reward(streak) == -0.1
    going = episode_outcome(["focus on water"], ["You focus on the water."], g)
    assert going == Outcome(False, None, 70.0) and reward(going) == 0.7


#: A lifespan task's gold run as the real env scores it: going outdoors is credited, then the right focus.
LIFESPAN = [("open door to hallway", "The door is now open.", 0), ("go to hallway", "You move to the hallway.", 0),
            ("open door to outside", "The door is now open.", 0), ("go to outside", "You move to the outside.", 50),
            ("focus on elephant", "You focus on the elephant.", 100)]


def test_arriving_where_the_real_env_credits_it_is_progress():
    g = goals_from_gold(LIFESPAN)
    assert g.milestones == (("you are in the outside", 50.0, 1), ("you focus on the elephant.", 100.0, 1))
    assert score_of(["teleport to outside"], ["You teleport to the outside."], g) == 50   # either way of arriving
    assert score_of(["go to hallway"], ["You move to the hallway."], g) == 0              # not where it counts


def test_the_reward_per_outcome_leads_to_the_task():
    """The reward of each outcome of a lifespan episode: trying (a focus) never pays less than not trying, and
    the right focus pays the most; wasting turns pays least."""
    g = goals_from_gold(LIFESPAN)
    out = (["go to outside"], ["You move to the outside."])
    cases = {
        "success": episode_outcome([*out[0], "focus on elephant"], [*out[1], "You focus on the elephant."], g),
        "partial": episode_outcome(*out, g),
        "nothing": episode_outcome(["look around"], ["This room is called the kitchen."], g),
        "wrong focus after progress": episode_outcome([*out[0], "focus on bee"], [*out[1], "You focus on the bee."], g),
        "wrong focus at once": episode_outcome(["focus on bee"], ["You focus on the bee."], g),
        "loop": episode_outcome(["look around"] * 3, ["This room is called the kitchen."] * 3, g),
        "unparseable": episode_outcome([None] * 3, [], g),
    }
    rewards = {name: reward(o) for name, o in cases.items()}
    assert rewards == {"success": 1.0, "partial": 0.5, "nothing": 0.0, "wrong focus after progress": 0.5,
                       "wrong focus at once": 0.0, "loop": -0.1, "unparseable": -0.1}
    assert cases["wrong focus after progress"].score == -100          # the env's own score is kept as it is


def test_the_papers_reward_on_built_trajectories():
    assert paper_reward(100, ["go to outside", "focus on elephant"]) == 1.0
    assert paper_reward(50, ["go to outside"]) == 0.5
    assert paper_reward(-100, ["focus on bee"]) == pytest.approx(-0.2)               # -0.2, x1.5 short: clamped
    assert paper_reward(-100, ["look", "go to outside", "focus on bee"]) == pytest.approx(-0.2)
    assert paper_reward(0, [f"look at {i}" for i in range(10)]) == pytest.approx(-0.15)   # no focus in 10 actions
    assert paper_reward(0, [f"look at {i}" for i in range(9)]) == 0.0
    assert paper_loops(["a", "a", "a", "a"]) == 2 and paper_loops(["a", "b", "a", "b", "a"]) == 2
    assert paper_reward(50, ["go to outside", "look", "look", "look"]) == pytest.approx(0.5 * 0.85)
    assert paper_reward(100, ["a"] * 12 + ["focus on x"]) == pytest.approx(0.3)      # 10 loops: the 0.3 floor
    assert paper_reward(0, []) == 0.0


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
