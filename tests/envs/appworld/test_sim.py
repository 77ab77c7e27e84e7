"""AppWorld in the simulator: the paper's rows as they are, the responder, and world-model answers good or bad."""

from __future__ import annotations

import json

import pytest

from tests.envs.appworld import fixtures as fx
from tests.eval.helpers import GoldWM, free_port
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.data.jsonl import DataError
from textwm.envs import get_env
from textwm.envs.simulator import WM_ERROR, Simulator

FAST = RetryPolicy(max_retries=1, backoff_s=0.01, max_backoff_s=0.01)
SPEC = get_env("appworld")
LOGIN = fx.call("spotify__login", username=fx.EMAIL, password=fx.PASSWORDS["spotify"])
LIBRARY = fx.call("spotify__show_song_library", page_index=0, page_limit=20)


def test_both_message_encodings_read_alike():
    as_string, as_list = SPEC.load_row(fx.rl_row(), need_sim=True), SPEC.load_row(fx.rl_row(messages_as_string=False))
    assert as_string.messages == as_list.messages and [m["role"] for m in as_string.messages] == ["system", "user"]
    assert (as_string.task_id, as_string.family, as_string.max_turns) == ("a1b2c3d_1", "a1b2c3d", 8)
    assert as_string.sim_task.ground_truth == "Salt and Cedar"
    with pytest.raises(DataError, match="wm_system_prompt"):
        SPEC.load_row({k: v for k, v in fx.rl_row().items() if k != "wm_system_prompt"}, need_sim=True)


def play(sim, replies):
    episode, steps = SPEC.start_episode(SPEC.load_row(fx.rl_row(), need_sim=True)), []
    for reply in replies:
        steps.append(sim.step(episode, SPEC.parse_action(reply)))
    return episode, steps


def test_a_solved_episode_with_the_world_model_answering_the_listing():
    wm = GoldWM([], fallback=lambda action: json.dumps(fx.LIBRARY) if "show_song_library" in action else None)
    try:
        with WMClient(wm.url, retry=FAST) as client:
            sim = Simulator(client)
            _, steps = play(sim, [fx.DEMO_STEPS[0][0], LOGIN, LIBRARY, fx.FINAL])
    finally:
        wm.close()
    assert [s.source for s in steps] == ["local", "local", "wm", "local"]
    assert steps[-1].outcome.reason == "success" and steps[-1].outcome.reward == 1.0
    (query,) = wm.requests
    sent = query[2]["input"]
    assert sent["action"] == LIBRARY and "Logged in: spotify" in sent["state"] and '"<token>"' in sent["state"]
    assert sent["system_prompt"].startswith("You are AppWorld's API server") and "Tool: spotify__show_song_library(" \
        in sent["system_prompt"] and "Salt and Cedar" in sent["system_prompt"]


def test_world_model_garbage_is_counted_and_scored_as_a_failed_call():
    wm = GoldWM([], fallback=lambda action: "<tool_response>Sure! Here are your songs</tool_response>")
    try:
        with WMClient(wm.url, retry=FAST) as client:
            episode, steps = play(Simulator(client), [fx.DEMO_STEPS[0][0], LOGIN, LIBRARY])
    finally:
        wm.close()
    assert [s.source for s in steps] == ["local", "local", "wm"]
    assert steps[-1].observation == "Sure! Here are your songs"  # the WM client drops the tags
    assert steps[-1].message == "<tool_response>\nSure! Here are your songs\n</tool_response>"
    assert episode.malformed == 1 and episode.observations[-1] == "Sure! Here are your songs"
    # partial credit of a question left unanswered (the passwords came back); the garbage is a failed call
    assert not steps[-1].outcome.done and steps[-1].outcome.reward == pytest.approx(0.15)


def test_an_unreachable_world_model_ends_the_step_as_a_wm_error():
    down = Simulator(WMClient(f"http://127.0.0.1:{free_port()}/", retry=FAST, timeout_s=2))
    _, steps = play(down, [fx.DEMO_STEPS[0][0], LOGIN, LIBRARY])
    assert [s.source for s in steps[:2]] == ["local", "local"]
    assert steps[2].failure == WM_ERROR and steps[2].observation is None and down.stats.wm_errors == 1
