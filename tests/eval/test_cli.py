"""sciworld/eval_sciworld.py in-process: flag checks, clear failures on bad input, the WM and fidelity modes."""

import json

import pytest

from tests.eval.helpers import ChatServer, GoldAgent, GoldWM, free_port, read_jsonl
from tests.eval.test_fidelity import transitions
from textwm.eval.run import EvalConfig, main, parse_config


def run(*argv):
    return main(list(argv), prog="eval_sciworld.py", env="sciworld")


@pytest.mark.parametrize(("argv", "message"), [
    (["agent-real", "--output-dir", "o"], "--rows is required"),
    (["agent-real", "--output-dir", "o", "--rows", "nope.jsonl", "--agent-url", "http://x"], "file not found"),
    (["agent-real", "--output-dir", "o", "--rows", "{rows}"], "exactly one agent"),
    (["agent-real", "--output-dir", "o", "--rows", "{rows}", "--agent-url", "u", "--agent-path", "p"], "exactly one agent"),
    (["agent-wm", "--output-dir", "o", "--rows", "{rows}", "--agent-url", "u"], "--wm-endpoint"),
    (["fidelity", "--output-dir", "o", "--wm-transitions", "{rows}"], "exactly one WM"),
    (["fidelity", "--output-dir", "o", "--wm-url", "u"], "--wm-transitions is required"),
    (["agent-real", "--output-dir", "o", "--rows", "{rows}", "--agent-url", "u", "--workers", "0"], "--workers must be >= 1"),
    (["agent-wm", "--output-dir", "o", "--rows", "{rows}", "--agent-url", "u", "--wm-endpoint", "e", "--wm-guard", "2"],
     "--wm-guard must be 0 or 1"),
    (["agent-real", "--output-dir", "o", "--rows", "{rows}", "--agent-url", "u", "--agent-extra-body", "[1]"],
     "must be a JSON object"),
])
def test_bad_flags_are_refused_with_a_reason(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.delenv("WM_ENDPOINT", raising=False)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    assert run(*[a.replace("{rows}", str(rows)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_yaml_config_with_cli_overrides(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"rows: {rows}\nagent_url: http://127.0.0.1:1/v1\nworkers: 4\ntasks: [boil, melt]\n")
    config = parse_config(["agent-real", "--config", str(cfg), "--output-dir", "o", "--workers", "3"], env="sciworld")
    assert isinstance(config, EvalConfig)
    assert (config.workers, config.tasks, config.rows, config.mode) == (3, ["boil", "melt"], str(rows), "agent-real")
    cfg.write_text("worker: 4\n")
    assert run("agent-real", "--config", str(cfg), "--output-dir", "o") == 2
    assert "unknown config key 'worker' (did you mean 'workers'?)" in capsys.readouterr().err


def test_unreachable_endpoints_are_named_before_rows_are_completed(sw_data, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    assert run("agent-real", "--rows", str(sw_data.rl), "--agent-url", dead + "/v1", "--output-dir", str(tmp_path)) == 2
    assert "agent endpoint" in capsys.readouterr().err
    assert run("agent-wm", "--rows", str(sw_data.rl), "--agent-url", dead + "/v1", "--wm-endpoint", dead + "/",
               "--output-dir", str(tmp_path)) == 2
    assert "WM proxy" in capsys.readouterr().err
    # A row without sim_task would be completed from the real env (minutes): the dead proxy is found first.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({k: v for k, v in sw_data.rows[0].items() if k != "sim_task"}) + "\n")
    assert run("agent-wm", "--rows", str(bare), "--agent-url", dead + "/v1", "--wm-endpoint", dead + "/",
               "--output-dir", str(tmp_path)) == 2
    assert "WM proxy" in capsys.readouterr().err


def test_agent_in_wm_mode_writes_episodes_and_summary(sw_data, tmp_path, capsys):
    agent_server = ChatServer(GoldAgent(sw_data.rows, sw_data.gold).reply)
    wm = GoldWM(sw_data.wm_rows)
    out = tmp_path / "out"
    try:
        code = run("agent-wm", "--rows", str(sw_data.rl), "--agent-url", agent_server.url, "--wm-endpoint", wm.url,
                   "--repeats", "2", "--wm-concurrency", "3", "--agent-extra-body", '{"seed": 7}',
                   "--output-dir", str(out))
    finally:
        agent_server.close()
        wm.close()
    assert code == 0, capsys.readouterr().err
    assert all(b["seed"] == 7 for m, p, b in agent_server.requests if m == "POST")
    episodes = read_jsonl(out / "episodes_wm.jsonl")
    assert len(episodes) == 4 and {e["reason"] for e in episodes} == {"success"}
    assert all(set(e["sources"]) <= {"local", "wm"} and e["wm_steps"] > 0 for e in episodes)
    summary = json.loads((out / "summary_wm.json").read_text())
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 4
    config = json.loads((out / "eval_config.json").read_text())
    assert config["mode"] == "agent-wm" and "agent_api_key" not in config
    assert "## Agent in the world model" in (out / "eval_sciworld.md").read_text()
    assert not (out / "episodes_real.jsonl").exists()


def test_fidelity_mode(tmp_path, capsys):
    data = transitions(tmp_path / "wm_test.jsonl")
    server = ChatServer(lambda messages: "You move to the kitchen.")
    try:
        code = run("fidelity", "--wm-transitions", str(data), "--wm-url", server.url, "--output-dir", str(tmp_path / "o"))
    finally:
        server.close()
    assert code == 0, capsys.readouterr().err
    fid = json.loads((tmp_path / "o" / "fidelity.json").read_text())
    assert fid["single_step"]["summary"]["exact_match"] == pytest.approx(1 / 6)
    assert (tmp_path / "o" / "single_step" / "eval_summary.json").exists()
    assert "Single-step fidelity" in capsys.readouterr().out
