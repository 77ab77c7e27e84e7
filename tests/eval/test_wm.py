"""The agent in the world model: the Simulator with the local responder, a scripted WM, and a WM that is down."""

import json

import pytest

from tests.eval.helpers import GoldWM, ScriptAgent, free_port, sciworld_focus
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.data.jsonl import DataError
from textwm.envs import get_env
from textwm.envs.simulator import Simulator
from textwm.eval import closed_loop

SPEC = get_env("sciworld")


def evaluate_agent_wm(starts, agent, sim, **kw):
    return closed_loop.evaluate_agent_wm(SPEC, starts, agent, sim, **kw)


def load_rows(path, **kw):
    return closed_loop.load_rows(SPEC, path, **kw)

FAST = RetryPolicy(max_retries=1, backoff_s=0.01, max_backoff_s=0.01)
#: Answered by the local responder from tracked state alone (no model).
LOCAL_ACTIONS = ["teleport to kitchen", "wait1", "teleport to hallway", "inventory", "task"]


def test_responder_only_episodes(sw_data):
    agent = ScriptAgent(LOCAL_ACTIONS)
    result = evaluate_agent_wm(sw_data.starts, agent, Simulator(None, use_local=True), concurrency=2,
                               max_turns=len(LOCAL_ACTIONS), progress=False)
    for rec in result.records:
        assert (rec.reason, rec.turns, rec.sources) == ("max_turns", 5, ["local"] * 5)
        assert rec.observations[:2] == ["You teleport to the kitchen.", "You decide to wait for 1 iterations."]
        assert rec.extra == {"local_steps": 5, "wm_steps": 0, "fallback_steps": 0, "wm_errors": 0}
    assert result.summary["local_steps"] == 10 and result.summary["wm_steps"] == 0 and result.summary["wm_errors"] == 0
    # a step the responder cannot answer, with no WM: a counted failure, not a made-up observation
    stuck = evaluate_agent_wm(sw_data.starts, ScriptAgent(["teleport to kitchen", "open fridge"]),
                              Simulator(None, use_local=True), progress=False)
    for rec in stuck.records:
        assert (rec.reason, rec.turns, rec.observations) == ("wm_error", 2, ["You teleport to the kitchen.", None])
        assert "no world model" in rec.error and rec.extra["wm_errors"] == 1
    assert stuck.summary["wm_errors"] == 2 and stuck.summary["success_rate"] == 0.0


def test_wm_down_marks_episodes_and_counts_errors(sw_data):
    with WMClient(f"http://127.0.0.1:{free_port()}/", retry=FAST, timeout_s=2) as client:
        result = evaluate_agent_wm(sw_data.starts, ScriptAgent(["open drawer"]), Simulator(client),
                                   repeats=2, concurrency=3, progress=False)
    assert result.summary["episodes"] == 4 and result.summary["wm_errors"] == 4
    assert result.summary["wm_step_errors"] == 4 and result.summary["reasons"] == {"wm_error": 4}
    for rec in result.records:
        assert rec.done is False and rec.score == 0.0 and "unavailable" in rec.error
        assert rec.actions == ["open drawer"] and rec.observations == [None]


def test_wrong_focus_and_unparseable_replies_in_the_wm(sw_data):
    wm = GoldWM(sw_data.wm_rows, fallback=sciworld_focus)
    try:
        with WMClient(wm.url, retry=FAST) as client:
            sim = Simulator(client)
            focus = evaluate_agent_wm(sw_data.starts, ScriptAgent(["focus on air"]), sim, progress=False)
            mute = evaluate_agent_wm(sw_data.starts[:1], ScriptAgent(["look around", "", "", ""]), sim, progress=False)
    finally:
        wm.close()
    assert {(r.reason, r.score, r.turns, r.done) for r in focus.records} == {("wrong_focus", -100.0, 1, True)}
    rec = mute.records[0]
    assert (rec.reason, rec.unparseable, rec.turns) == ("unparseable_streak", 3, 4)
    assert rec.actions == ["look around", None, None, None] and rec.sources[1:] == ["feedback"] * 3  # the format hint, not the env


def test_rows_without_sim_task_are_refused(sw_data, tmp_path):
    bare = tmp_path / "rl.jsonl"
    row = {k: v for k, v in sw_data.rows[0].items() if k != "sim_task"}
    bare.write_text(json.dumps(row) + "\n")
    assert load_rows(str(bare))[0].task_id == row["task_id"]        # fine for the real env
    with pytest.raises(DataError, match=r"rl.jsonl:1: sim_task: RL row '.*' has no 'sim_task'.*build_wm_dataset.py"):
        load_rows(str(bare), need_sim=True)
    with pytest.raises(DataError, match="sim_task"):
        evaluate_agent_wm([SPEC.load_row(row)], ScriptAgent(["look around"]), Simulator(None, use_local=True),
                          progress=False)
