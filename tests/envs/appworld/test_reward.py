"""AppWorld's reward and termination on hand-written trajectories: a solved demo beats a cut or wrong one."""

from __future__ import annotations

import pytest

from tests.envs.appworld import fixtures as fx
from textwm.envs.appworld.responder import COMPLETE_TASK_RESPONSE
from textwm.envs.appworld.reward import ACTION_SCORE_CAP, answer_matches, episode_outcome, rules_of
from textwm.envs.appworld.world import parse_world

WORLD = parse_world(fx.WORLD_TEXT, ground_truth="Salt and Cedar")


def outcome(steps, final=None, world=WORLD):
    actions = [a for a, _ in steps] + ([final] if final else [])
    observations = [o for _, o in steps] + ([COMPLETE_TASK_RESPONSE] if final else [])
    return episode_outcome(rules_of(world), actions, observations)


def test_the_demo_scores_above_its_cut_and_wrong_versions():
    solved = outcome(fx.DEMO_STEPS, fx.FINAL)
    cut = outcome(fx.DEMO_STEPS)
    wrong = outcome(fx.DEMO_STEPS, fx.call("supervisor__complete_task", answer="Night Ferry"))
    assert solved.done and solved.reason == "success" and solved.score == 1.0 and solved.reward == 1.0
    assert not cut.done and cut.reward == pytest.approx(0.15)  # records came back, no answer
    assert wrong.done and wrong.reason == "completed" and wrong.score < 1.0
    assert solved.reward > wrong.reward and solved.reward > cut.reward


def test_numbers_get_credit_by_distance():
    world = parse_world(fx.WORLD_TEXT, ground_truth="40")
    near = outcome(fx.DEMO_STEPS, fx.call("supervisor__complete_task", answer="There are 38."), world)
    far = outcome(fx.DEMO_STEPS, fx.call("supervisor__complete_task", answer="3"), world)
    assert near.reward == pytest.approx(0.25 * (1 - 2 / 40)) and far.reward == pytest.approx(0.15)


@pytest.mark.parametrize(("step", "factor"), [
    ((fx.call("spotify__login", username="your_username", password="your_password"), '{"error": "x"}'), 0.2),
    ((fx.call("spotify__show_song", song_id={"type": "integer"}), '{"error": "x"}'), 0.3),
])
def test_placeholders_and_schema_values_are_penalised(step, factor):
    steps = [fx.DEMO_STEPS[0], step, *fx.DEMO_STEPS[2:]]
    assert outcome(steps, fx.FINAL).reward == pytest.approx(factor)


def test_no_password_lookup_and_unknown_tools_are_penalised():
    steps = [fx.DEMO_STEPS[2], fx.DEMO_STEPS[3]]
    assert outcome(steps, fx.FINAL).reward == pytest.approx(0.1)
    bogus = [*fx.DEMO_STEPS, (fx.call("spotify__show_everything"), '{"error": "No API"}')]
    assert outcome(bogus, fx.FINAL).reward == pytest.approx(1 - 1 / 7)


def test_a_repeated_call_ends_the_episode():
    steps = [*fx.DEMO_STEPS, fx.DEMO_STEPS[-1]]
    result = outcome(steps)
    assert result.done and result.reason == "repeat"


def test_action_tasks_score_below_success_and_reward_state_changes():
    world = parse_world(fx.WORLD_TEXT.replace("What is the title of", "Like"), ground_truth="")
    like = (fx.call("spotify__like_song", song_id=12), '{"message": "Song liked."}')
    done = outcome([*fx.DEMO_STEPS, like], fx.call("supervisor__complete_task"), world)
    lazy = outcome(fx.DEMO_STEPS, fx.call("supervisor__complete_task"), world)
    unfinished = outcome([*fx.DEMO_STEPS, like], None, world)
    assert done.done and done.reason == "completed" and done.score == ACTION_SCORE_CAP
    assert done.reward > lazy.reward > unfinished.reward > 0


def test_answer_matching_folds_case_and_space():
    assert answer_matches("The longest is  salt AND cedar.", "Salt and Cedar")
    assert not answer_matches("anything", "")


def test_numbers_must_be_the_answer_not_among_many():
    assert answer_matches("24", "24") and answer_matches("There are 24 songs.", "24")
    assert not answer_matches("124", "24") and not answer_matches("240 songs", "24")
    assert not answer_matches("0 1 2 3 24 99", "24")
    assert not answer_matches("Salt and Cedars", "Salt and Cedar") and answer_matches("salt and cedar!", "Salt and Cedar")


def test_a_refused_complete_task_completes_nothing():
    refused = [*fx.DEMO_STEPS, (fx.FINAL, '{"error": "Response status code is 422:\\n{\\"message\\":\\"x\\"}"}')]
    result = episode_outcome(rules_of(WORLD), [a for a, _ in refused], [o for _, o in refused])
    assert not result.done and result.score < 1.0
