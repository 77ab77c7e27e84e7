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


# --- the paper's rule (reward: paper) -------------------------------------------------------------------

def paper(steps, final=None, world=WORLD, last_reply=None, instruction=None):
    from textwm.envs.appworld.reward import paper_reward

    actions = [a for a, _ in steps] + ([final] if final else [])
    observations = [o for _, o in steps] + ([COMPLETE_TASK_RESPONSE] if final else [])
    reply = last_reply if last_reply is not None else (actions[-1] if actions and actions[-1] else "I give up.")
    return paper_reward(rules_of(world), actions, observations, reply, instruction or world.instruction)


def test_the_papers_rule_pays_the_same_for_a_clean_answer_and_takes_its_format_factor():
    from textwm.envs.appworld.reward import format_factor

    assert paper(fx.DEMO_STEPS, fx.FINAL) == 1.0
    fenced = f"```json\n{fx.FINAL}\n```"
    assert paper(fx.DEMO_STEPS, fx.FINAL, last_reply=fenced) == pytest.approx(0.4 * 0.4)   # fence, not JSON-first
    assert format_factor(fx.FINAL.replace('"parameters"', '"arguments"'), True) == pytest.approx(0.7)
    assert format_factor("[TOOL_CALLS]" + fx.FINAL, True) == 1.0 and format_factor("text", False) == 0.0


ACTION_WORLD = parse_world(fx.WORLD_TEXT.replace("What is the title of", "Unfollow the artist of"), ground_truth="")
LIKE = (fx.call("spotify__like_song", song_id=12), '{"message": "Song liked."}')


def test_the_papers_action_rule_adds_the_completion_bonus_after_the_penalties():
    # 5 working calls, 4 of them successful, records: 0.6 * 4/5 + 0.1; the real login +0.2; completed after a
    # state change +0.3. Ours applies the penalties to the bonus too; with none, both give the same here.
    steps = [*fx.DEMO_STEPS, LIKE]
    expected = 0.6 * 5 / 6 + 0.1 + 0.2 + 0.3
    assert paper(steps, fx.call("supervisor__complete_task"), ACTION_WORLD, instruction="Like my top song.") \
        == pytest.approx(min(1.0, expected))
    # Without the password lookup the x0.1 falls on the calls' credit only, not on the completion bonus.
    no_lookup = steps[1:]
    got = paper(no_lookup, fx.call("supervisor__complete_task"), ACTION_WORLD, instruction="Like my top song.")
    assert got == pytest.approx((0.6 * 4 / 5 + 0.1) * 0.1 + 0.2 + 0.3)


def test_the_papers_keyword_rule_stalling_and_giving_up():
    steps = [*fx.DEMO_STEPS, LIKE]
    done = fx.call("supervisor__complete_task")
    uncapped = 0.6 * 5 / 6 + 0.1 + 0.2 + 0.3            # the cap at 1 comes last
    assert paper(steps, done, ACTION_WORLD, instruction="Unlike my top song.") == pytest.approx(0.3 * uncapped)
    unfinished = paper(steps, None, ACTION_WORLD, instruction="Like my top song.")
    prose = "Let me think about which song to like before I call the tool, carefully. "
    stalled = paper(steps, None, ACTION_WORLD, instruction="Like my top song.", last_reply=prose + LIKE[0])
    gave_up = paper([*steps, (None, None)], None, ACTION_WORLD, instruction="Like my top song.",
                    last_reply="I cannot do this.")
    assert stalled == pytest.approx(0.5 * unfinished) and gave_up == pytest.approx(0.3 * unfinished)


def likes(*song_ids):
    return [(fx.call("spotify__like_song", song_id=i), '{"message": "Song liked."}') for i in song_ids]


def test_an_unfinished_episode_still_at_work_keeps_more():
    # The password lookup (records) and the real login, then likes, every call a success: 0.6 + 0.1 + 0.2 (the
    # real login); unfinished: x0.7 with a state change among 8 or more calls, else x0.5.
    start = [fx.DEMO_STEPS[0], fx.DEMO_STEPS[2]]
    at_work = paper([*start, *likes(1, 2, 3, 4, 5, 6)], None, ACTION_WORLD, instruction="Like my songs.")
    fewer = paper([*start, *likes(1, 2, 3, 4, 5)], None, ACTION_WORLD, instruction="Like my songs.")
    assert at_work == pytest.approx(0.9 * 0.7) and fewer == pytest.approx(0.9 * 0.5)


def test_prose_is_what_comes_before_the_call_not_before_its_arguments():
    from textwm.envs.appworld.reward import _prose_before_call

    call = '[{"name": "spotify__show_playlist_library", "parameters": {"page_index": 0}}]'
    assert _prose_before_call(call) == "" and _prose_before_call(f"Let me look. {call}") == "Let me look."
    assert _prose_before_call("No call [here.") == ""
