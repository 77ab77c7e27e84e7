"""The whole `sciworld/eval_sciworld.py all` as a user runs it: a tiny local AR agent, a real native WM server
+ proxy (tiny SDAR) on loopback, two real-env workers (slow tier, ~1-2 min on 2 CPU cores)."""

import json

import pytest

from tests.conftest import run_script
from tests.eval.helpers import free_port, read_jsonl
from textwm.generation.settings import DecodeSettings
from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, sw_data):
    """A tiny AR agent and a tiny SDAR WM whose tokenizers know ScienceWorld text (short prompts)."""
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts

    texts = list(chat_texts(sw_data.wm_rows + sw_data.rows))
    root = tmp_path_factory.mktemp("tiny")
    return (build_tiny_checkpoint(root / "agent_ar", texts, family="ar", vocab_size=2048, seed=3),
            build_tiny_checkpoint(root / "wm_sdar", texts, family="sdar", block_size=4, vocab_size=2048, seed=4))


@pytest.fixture(scope="module")
def wm_stack(tmp_path_factory, tiny_models):
    run_dir = tmp_path_factory.mktemp("stack")
    server_port, proxy_port = free_port(), free_port()
    server = ManagedProcess("wm_server", run_dir)
    spec = BackendSpec(backend="native", model_path=str(tiny_models[1]), port=server_port, served_model_name="tiny-wm",
                       device="cpu", max_model_len=8192, decode=DecodeSettings(gen_length=16, temperature=0.0))
    server.start(server_command(spec))
    proxy = ManagedProcess("wm_proxy", run_dir)
    try:
        server.wait_healthy(f"http://127.0.0.1:{server_port}/health", 180)
        proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"), "--timeout", "60"])
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        yield {"server": f"http://127.0.0.1:{server_port}/v1", "proxy": f"http://127.0.0.1:{proxy_port}/"}
    finally:
        proxy.stop()
        server.stop()


def test_eval_all_end_to_end(sw_data, tiny_models, wm_stack, tmp_path):
    out = tmp_path / "eval"
    proc = run_script("sciworld/eval_sciworld.py", "all", "--rows", str(sw_data.rl), "--agent-path", str(tiny_models[0]),
                      "--device", "cpu", "--max-turns", "3", "--agent-max-tokens", "12", "--temperature", "1.0",
                      "--workers", "2",
                      "--wm-endpoint", wm_stack["proxy"], "--wm-guard", "0", "--wm-max-tokens", "16",
                      "--wm-transitions", str(sw_data.wm), "--wm-url", wm_stack["server"],
                      "--single-step-limit", "8", "--output-dir", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n = len(sw_data.rows)
    real, wm, w2r = (read_jsonl(out / f"episodes_{m}.jsonl") for m in ("real", "wm", "w2r"))
    assert len(real) == len(wm) == len(w2r) == n
    for e in real:
        assert 1 <= e["turns"] <= 3 and len(e["actions"]) == len(e["observations"]) == e["turns"]
        assert e["reason"] in ("max_turns", "unparseable_streak", "success", "wrong_focus", "env_done")
    # (a random agent sampled at temperature 1 still writes parseable, if useless, actions)
    assert sum(a is not None for e in real + wm for a in e["actions"]) > 0
    # every WM step went to the WM (guard off): answered by the tiny SDAR model, or a counted failure
    summary_wm = json.loads((out / "summary_wm.json").read_text())
    assert summary_wm["wm_steps"] + summary_wm["wm_step_errors"] == sum(a is not None for e in wm for a in e["actions"])
    assert summary_wm["wm_steps"] > 0 and summary_wm["local_steps"] == 0 and summary_wm["responder"] is False
    assert all(s in ("wm", None) for e in wm for s in e.get("sources", []))
    assert [e["episode_id"] for e in w2r] == [e["episode_id"] for e in wm]
    assert all(e["actions"] == [a for a in wm_e["actions"] if a is not None][:len(e["actions"])]
               for e, wm_e in zip(w2r, wm))
    fid = json.loads((out / "fidelity.json").read_text())
    for mode in ("real", "wm", "w2r"):
        assert fid[mode]["episodes"] == n and fid[mode]["successes"] <= n
        assert fid[mode]["success_rate"] == fid[mode]["successes"] / n
    if fid["real"]["success_rate"]:
        assert fid["cr"] == fid["w2r"]["success_rate"] / fid["real"]["success_rate"]
    else:
        assert fid["cr"] is None and "undefined" in fid["cr_note"]
    assert set(fid["per_task"]) == {r["task_id"].split("_v")[0] for r in sw_data.rows}
    ss = fid["single_step"]
    assert ss["rows"] == 8 and ss["generator"]["model"] == "tiny-wm"
    assert {"exact_match", "rouge_l_f1", "bleu_1"} <= set(ss["summary"])
    assert (out / "single_step" / "eval_summary.json").exists()
    md = (out / "eval_sciworld.md").read_text()
    assert "CR = W2R / Real" in md and "## Agent in the real env" in md and "Single-step" in md
    assert json.loads((out / "eval_config.json").read_text())["workers"] == 2
    agreement = json.loads((out / "agreement.json").read_text())
    assert agreement["episodes"] == n and agreement["all"]["steps"] == agreement.get("wm", {}).get("steps", 0) > 0
    assert "Per-step agreement" in md

    # The same WM episodes replayed from their file (the world model ran elsewhere): the same replays.
    again = tmp_path / "w2r"
    proc = run_script("sciworld/eval_sciworld.py", "w2r", "--rows", str(sw_data.rl), "--wm-episodes",
                      str(out / "episodes_wm.jsonl"), "--workers", "2", "--output-dir", str(again), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    replayed = read_jsonl(again / "episodes_w2r.jsonl")
    assert [(e["episode_id"], e["actions"], e["observations"], e["score"]) for e in replayed] == [
        (e["episode_id"], e["actions"], e["observations"], e["score"]) for e in w2r]
    assert json.loads((again / "agreement.json").read_text()) == agreement


def test_a_worker_that_dies_mid_episode_is_replaced(sw_data):
    """The episode on a killed worker ends as env_error (counted); the next one plays on a replacement."""
    import os
    import signal

    from tests.eval.helpers import GoldAgent
    from textwm.envs.blocking import BlockingPool
    from textwm.eval.closed_loop import evaluate_agent_real

    gold = GoldAgent(sw_data.rows, sw_data.gold)
    row = next(r for r in sw_data.rows if r["task_id"].startswith("find-non-living-thing"))
    with BlockingPool(sw_data.spec, 1) as pool:
        class Killer(GoldAgent):
            def reply(self, messages):
                if len(self.seen) == 2:            # third reply of the first episode: its worker is killed
                    os.kill(pool.health()["workers"][0]["pid"], signal.SIGKILL)
                return super().reply(messages)

        result = evaluate_agent_real(sw_data.spec, [sw_data.spec.load_row(row)], Killer(sw_data.rows, sw_data.gold),
                                     pool=pool, repeats=2, progress=False)
        assert pool.restarts == 1
    first, second = result.records
    assert (first.reason, first.turns, first.observations[-1]) == ("env_error", 3, None)
    assert "died" in first.error
    assert (second.reason, second.score, second.actions) == ("success", 100.0, gold.by_instruction[row["instruction"]])
    assert result.summary["env_errors"] == 1 and result.summary["worker_restarts"] == 1
