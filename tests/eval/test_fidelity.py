"""WM fidelity: teacher-forced single-step scores through the scorer; Real / WM / W2R success rates and CR."""

import json

import pytest

from tests.conftest import write_lines
from tests.eval.helpers import ChatServer, free_port
from textwm.eval.episodes import EpisodeRecord, summarize
from textwm.eval.fidelity import (
    CheckpointWM,
    FidelityError,
    closed_loop_fidelity,
    closed_loop_markdown,
    success_ratio,
    wm_fidelity_single_step,
)
from textwm.generation.api import ApiGenerationConfig
from textwm.generation.settings import DecodeSettings

OBS = ["You move to the kitchen.", "The door is now open.", "You focus on the orange.", "Nothing happens.",
       "You pick up the thermometer.", "The stove is now activated."]


def transitions(path):
    rows = []
    for i, obs in enumerate(OBS):
        rows.append({"messages": [{"role": "system", "content": "You are a world model."},
                                  {"role": "user", "content": f"State: step {i}\n\nAction: act {i}"},
                                  {"role": "assistant", "content": obs}],
                     "source": "gold" if i % 2 == 0 else "explore", "task": "boil"})
    return write_lines(path, rows)


def test_single_step_from_an_endpoint(tmp_path):
    data = transitions(tmp_path / "wm_test.jsonl")
    truth = {f"act {i}": obs for i, obs in enumerate(OBS)}

    def answer(messages):
        i = int(messages[-1]["content"].rsplit(" ", 1)[1])
        return truth[f"act {i}"] if i % 2 == 0 else "<think>x</think>Nothing at all."

    server = ChatServer(answer, model="wm")
    try:
        result = wm_fidelity_single_step(data, tmp_path / "out", ApiGenerationConfig(server.url, max_tokens=32))
    finally:
        server.close()
    s = result["summary"]
    assert (s["num_samples"], s["exact_match"], s["mauve"]) == (6, 0.5, None)
    assert 0 < s["rouge_l_f1"] < 1
    assert result["exact_match_by_source"] == {"explore": {"num_samples": 3, "exact_match": 0.0},
                                               "gold": {"num_samples": 3, "exact_match": 1.0}}
    summary_file = tmp_path / "out" / "single_step" / "eval_summary.json"
    assert json.loads(summary_file.read_text())["wm_test"]["exact_match"] == 0.5
    assert result["generator"]["model"] == "wm"
    body = next(b for m, p, b in server.requests if m == "POST")
    assert body["messages"][-1]["role"] == "user" and body["max_tokens"] == 32   # the reference is not sent


def test_single_step_from_a_local_checkpoint_with_a_limit(tmp_path, tiny_sdar_dir):
    data = transitions(tmp_path / "wm_test.jsonl")
    result = wm_fidelity_single_step(data, tmp_path / "out", CheckpointWM(
        str(tiny_sdar_dir), decode=DecodeSettings(gen_length=8, temperature=0.0), num_gpus=0, per_batch=2), limit=4)
    assert result["rows"] == 4 and result["summary"]["num_samples"] == 4
    out = tmp_path / "out" / "single_step"
    assert len((out / "wm_test_outputs.jsonl").read_text().splitlines()) == 4
    assert (out / "eval_summary.md").exists() and result["generator"]["kind"] == "checkpoint"


def test_single_step_fails_clearly(tmp_path):
    data = transitions(tmp_path / "wm_test.jsonl")
    with pytest.raises(FidelityError, match="not reachable"):
        wm_fidelity_single_step(data, tmp_path, ApiGenerationConfig(f"http://127.0.0.1:{free_port()}/v1"))
    server = ChatServer(lambda messages: 400)
    try:
        with pytest.raises(FidelityError, match="every one of the 6"):
            wm_fidelity_single_step(data, tmp_path, ApiGenerationConfig(server.url, max_retries=0))
    finally:
        server.close()


def _records(mode, outcomes):
    return [EpisodeRecord(mode=mode, episode_id=f"{task}_v{i}#0", task_id=f"{task}_v{i}", task=task,
                          score=100.0 if ok else 0.0, success=ok, done=ok, turns=1, reason="success" if ok else "max_turns")
            for i, (task, ok) in enumerate(outcomes)]


def test_success_rates_and_cr():
    assert success_ratio(0.25, 0.5) == (0.5, None)
    assert success_ratio(0.5, 0.0)[0] is None and "undefined" in success_ratio(0.5, 0.0)[1]
    real = summarize(_records("real", [("boil", True), ("boil", True), ("melt", False), ("melt", False)]))
    wm = summarize(_records("wm", [("boil", True), ("boil", True), ("melt", True), ("melt", False)]))
    w2r = summarize(_records("w2r", [("boil", True), ("boil", False), ("melt", True), ("melt", False)]))
    fid = closed_loop_fidelity(real, wm, w2r)
    assert (fid["real"]["success_rate"], fid["wm"]["success_rate"], fid["w2r"]["success_rate"]) == (0.5, 0.75, 0.5)
    assert fid["cr"] == 1.0 and fid["cr_note"] is None
    assert fid["per_task"]["boil"]["cr"] == 0.5
    assert fid["per_task"]["melt"]["cr"] is None and "undefined" in fid["per_task"]["melt"]["cr_note"]
    assert fid["real"]["successes"] == 2 and fid["w2r"]["episodes"] == 4
    table = closed_loop_markdown(fid)
    assert "CR = W2R / Real = 1.000" in table and "| melt | 0.000 (0/2) | 0.500 (1/2) | 0.500 (1/2) | n/a |" in table
    assert fid["real"]["success_ci95"] == [0.15, 0.85]          # Wilson, 2 of 4
    assert "| Real | 4 | 2 | 0.500 | [0.150, 0.850] |" in table


@pytest.mark.parametrize(("successes", "episodes", "interval"), [
    (0, 10, [0.0, 0.2775]), (5, 10, [0.2366, 0.7634]), (10, 10, [0.7225, 1.0]), (1, 40, [0.0044, 0.1288]),
    (0, 0, None)])
def test_success_rate_intervals_are_wilson_95(successes, episodes, interval):
    from textwm.eval.episodes import wilson_interval

    assert wilson_interval(successes, episodes) == interval


def test_per_step_agreement_compares_the_same_actions_by_who_answered():
    from textwm.eval.closed_loop import step_agreement
    from textwm.eval.episodes import EpisodeRecord

    def record(mode, actions, observations, sources=()):
        return EpisodeRecord(mode=mode, episode_id="e1", task_id="t", task="t", score=0.0, success=False, done=False,
                             turns=len(actions), reason="", actions=actions, observations=observations,
                             sources=list(sources), extra={"wm_steps": 1})

    # An unparseable reply (None) is not replayed: the replay's actions line up with the parsed ones.
    wm = record("wm", ["look", None, "go north", "take key"], ["A room.", None, "A hall. ", "You take it."],
                ["local", None, "wm", "wm"])
    real = record("w2r", ["look", "go north", "take key"], ["A room.", "A hall.", "There is no key."])
    got = step_agreement([wm], [real])
    assert got == {"all": {"steps": 3, "agree": 2, "rate": 0.6667}, "local": {"steps": 1, "agree": 1, "rate": 1.0},
                   "wm": {"steps": 2, "agree": 1, "rate": 0.5}, "episodes": 1}
    assert step_agreement([wm], []) == {"episodes": 0}
    # A record read back from its dict is the same record (its extra keys included).
    assert EpisodeRecord.from_dict(wm.to_dict()) == wm
