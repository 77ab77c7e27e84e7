"""The agent in the real ScienceWorld env, and W2R replays (one shared worker JVM)."""

import pytest

from tests.eval.helpers import GoldAgent, GoldWM, ScriptAgent
from textwm.clients.wm import WMClient
from textwm.envs import get_env
from textwm.envs.simulator import Simulator
from textwm.eval import closed_loop
from textwm.eval.agents import AgentError
from textwm.eval.closed_loop import EvalInputError
from textwm.eval.episodes import EpisodeRecord
from textwm.eval.fidelity import closed_loop_fidelity

SPEC = get_env("sciworld")


def evaluate_agent_real(starts, agent, **kw):
    return closed_loop.evaluate_agent_real(SPEC, starts, agent, **kw)


def evaluate_agent_wm(starts, agent, sim, **kw):
    return closed_loop.evaluate_agent_wm(SPEC, starts, agent, sim, **kw)


def replay_in_real(records, by_id, **kw):
    return closed_loop.replay_in_real(SPEC, records, by_id, **kw)


def test_gold_agent_succeeds_on_every_task(fleet, sw_data):
    result = evaluate_agent_real(sw_data.starts, GoldAgent(sw_data.rows, sw_data.gold), pool=fleet, progress=False)
    s = result.summary
    assert (s["episodes"], s["successes"], s["success_rate"], s["mean_score"]) == (2, 2, 1.0, 100.0)
    assert set(s["per_task"]) == {"find-non-living-thing", "lifespan-longest-lived"}
    assert all(b["success_rate"] == 1.0 for b in s["per_task"].values())
    for rec in result.records:
        gold = sw_data.gold[rec.task_id]
        assert (rec.reason, rec.done, rec.score, rec.turns) == ("success", True, 100.0, len(gold))
        assert rec.actions == gold and len(rec.observations) == len(gold) and rec.scores[-1] == 100.0


def test_wrong_focus_ends_the_episode_at_minus_100(fleet, sw_data):
    # (find-* tasks accept any object of the kind asked for: air is a fine non-living thing, +58)
    rows = [s for s in sw_data.starts if s.task_id.startswith("lifespan-longest-lived")]
    result = evaluate_agent_real(rows, ScriptAgent(["focus on air"]), pool=fleet, repeats=2, progress=False)
    assert result.summary["success_rate"] == 0.0 and result.summary["mean_score"] == -100.0
    for rec in result.records:
        assert (rec.reason, rec.done, rec.score, rec.turns, rec.success) == ("wrong_focus", True, -100.0, 1, False)
        assert rec.observations == ["You focus on the air."]


def test_unparseable_replies_are_counted_and_never_sent_to_the_env(fleet, sw_data):
    agent = ScriptAgent(["", "<think>hmm</think>", "   "])
    result = evaluate_agent_real(sw_data.starts[:1], agent, pool=fleet, progress=False)
    rec = result.records[0]
    assert (rec.reason, rec.unparseable, rec.turns, rec.done) == ("unparseable_streak", 3, 3, False)
    assert rec.actions == [None] * 3 and rec.observations == [None] * 3
    assert result.summary["unparseable_replies"] == 3
    # the agent gets the format hint of RL training, never something that passes for an env observation
    hint = sw_data.spec.invalid_reply_hint
    assert agent.seen[1][-1] == {"role": "user", "content": hint}
    assert "No known action" not in hint


def test_max_turns_agent_errors_and_repeats(fleet, sw_data):
    looker = evaluate_agent_real(sw_data.starts, ScriptAgent(["look around"]), pool=fleet, max_turns=2, repeats=2,
                                 progress=False)
    assert [r.episode_id for r in looker.records] == [f"{r['task_id']}#{k}" for r in sw_data.rows for k in (0, 1)]
    assert {(r.reason, r.turns, r.done) for r in looker.records} == {("max_turns", 2, False)}
    broken = evaluate_agent_real(sw_data.starts[:1], ScriptAgent(["look around", AgentError("endpoint gone")]),
                                 pool=fleet, progress=False)
    rec = broken.records[0]
    assert (rec.reason, rec.turns, rec.error) == ("agent_error", 1, "endpoint gone")
    assert broken.summary["agent_errors"] == 1 and broken.summary["success_rate"] == 0.0


def test_unknown_variation_is_bad_input(fleet, sw_data):
    start = SPEC.load_row({**sw_data.rows[0], "task_id": "find-animal_v99999"})
    with pytest.raises(EvalInputError, match="find-animal_v99999"):
        evaluate_agent_real([start], ScriptAgent(["look around"]), pool=fleet, progress=False)


def _wm_record(task_id, actions):
    return EpisodeRecord(mode="wm", episode_id=f"{task_id}#0", task_id=task_id, task=task_id.split("_v")[0],
                         score=0.0, success=False, done=False, turns=len(actions), reason="max_turns",
                         actions=list(actions))


def test_w2r_replays_wm_actions_in_the_real_env(fleet, sw_data):
    by_id = {s.task_id: s for s in sw_data.starts}
    a, b = sorted(by_id)
    records = [_wm_record(a, [None, *sw_data.gold[a], "look around"]),   # unparseable turns are skipped
               _wm_record(b, ["look around", "focus on air", "look around"]),   # b: lifespan-longest-lived
               _wm_record(b, [None])]
    records[2].episode_id = f"{b}#1"
    result = replay_in_real(records, by_id, pool=fleet, progress=False)
    first, second, third = result.records
    assert (first.reason, first.score, first.turns) == ("success", 100.0, len(sw_data.gold[a]))
    assert (second.reason, second.score, second.turns) == ("wrong_focus", -100.0, 2)
    assert (third.reason, third.score, third.turns) == ("replay_end", 0.0, 0)
    assert result.summary["successes"] == 1 and {r.mode for r in result.records} == {"w2r"}


def test_gold_agent_in_a_perfect_wm_gives_cr_1(fleet, sw_data):
    agent = GoldAgent(sw_data.rows, sw_data.gold)
    wm_server = GoldWM(sw_data.wm_rows)
    try:
        with WMClient(wm_server.url) as client:
            wm = evaluate_agent_wm(sw_data.starts, agent, Simulator(client), concurrency=2, progress=False)
    finally:
        wm_server.close()
    assert wm.summary["success_rate"] == 1.0
    assert wm.summary["wm_steps"] + wm.summary["local_steps"] == sum(len(g) for g in sw_data.gold.values())
    assert all(set(r.sources) <= {"local", "wm"} and r.reason == "success" for r in wm.records)
    real = evaluate_agent_real(sw_data.starts, agent, pool=fleet, progress=False)
    w2r = replay_in_real(wm.records, {s.task_id: s for s in sw_data.starts}, pool=fleet, progress=False)
    fid = closed_loop_fidelity(real.summary, wm.summary, w2r.summary)
    assert (fid["real"]["success_rate"], fid["wm"]["success_rate"], fid["w2r"]["success_rate"], fid["cr"]) == \
        (1.0, 1.0, 1.0, 1.0)
    assert all(t["cr"] == 1.0 for t in fid["per_task"].values())
