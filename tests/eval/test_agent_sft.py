"""Agent SFT demos from an endpoint agent in the real ScienceWorld (the paper's create_sft_gpt_agent.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.eval.helpers import ChatServer, GoldAgent, read_jsonl
from textwm.eval.agent_sft import PaperScript, main

ROOT = Path(__file__).resolve().parents[2]


def _agent_server(sw_data):
    """Gold actions for find-non-living-thing, a wrong focus (score -100) for the lifespan task."""
    gold = {tid: (["focus on air"] if tid.startswith("lifespan") else actions) for tid, actions in sw_data.gold.items()}
    return ChatServer(GoldAgent(sw_data.rows, gold).reply)


def test_the_paper_command_keeps_the_perfect_episodes_as_sft_rows(sw_data, tmp_path):
    server = _agent_server(sw_data)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    try:
        out = subprocess.run(
            [sys.executable, str(ROOT / "sciworld/create_sft_gpt_agent.py"), "--agent-url", server.url,
             "--rows", str(sw_data.rl), "--out", str(tmp_path / "perfect.jsonl"), "--all-out", str(tmp_path / "all.jsonl"),
             "--workers", "1"], capture_output=True, text=True, env=env, timeout=300)
        bodies = [b for m, _, b in server.requests if m == "POST"]
    finally:
        server.close()
    assert out.returncode == 0, out.stderr[-2000:]
    assert "successes: 1/2" in out.stdout and "perfect.jsonl: 1 demos" in out.stdout
    # an agent other than the OpenAI API gets none of the GPT-only settings
    assert bodies and all("max_tokens" in b and "reasoning_effort" not in b for b in bodies)
    (demo,) = read_jsonl(tmp_path / "perfect.jsonl")
    every = read_jsonl(tmp_path / "all.jsonl")
    row = next(r for r in sw_data.rows if r["task_id"] == demo["task_id"])
    gold = sw_data.gold[demo["task_id"]]
    assert (demo["score"], demo["success"], demo["turns"], demo["reason"]) == (100.0, True, len(gold), "success")
    assert demo["instruction"] == row["instruction"] and "sim_task" not in demo
    messages = demo["messages"]
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "user"] * len(gold)
    assert [m["content"] for m in messages if m["role"] == "assistant"] == gold
    start = json.loads(row["messages"]) if isinstance(row["messages"], str) else row["messages"]
    # (the first user message may be rebuilt from the real reset: ScienceWorld reorders some rooms on each load)
    assert messages[0] == start[0] and row["instruction"] in messages[1]["content"]
    assert sorted((r["reason"], r["score"]) for r in every) == [("success", 100.0), ("wrong_focus", -100.0)]


def test_failed_episodes_are_counted_not_kept_and_every_failure_exits_1(sw_data, tmp_path, capsys):
    server = ChatServer(lambda messages: 400)
    try:
        code = main(["--env", "sciworld", "--rows", str(sw_data.rl), "--out", str(tmp_path / "demos.jsonl"),
                     "--agent-url", server.url, "--workers", "1", "--max-turns", "3"])
    finally:
        server.close()
    captured = capsys.readouterr()
    assert code == 1 and "FAILED (not kept): 2 (agent_error 2)" in captured.out
    assert "every episode failed" in captured.err
    assert (tmp_path / "demos.jsonl").read_text() == ""


def test_the_openai_api_needs_a_key_and_missing_rows_say_how_to_make_them(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    assert main(["--env", "sciworld", "--rows", str(rows), "--out", str(tmp_path / "o.jsonl"),
                 "--agent-model", "gpt-5.5"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    script = PaperScript(env="sciworld", rows="data/rl.jsonl", out="data/demos.jsonl", rows_hint="run the splitter")
    assert script.main(tmp_path, []) == 2
    err = capsys.readouterr().err
    assert "data/rl.jsonl not found: run the splitter, or give --rows" in err
    assert not (tmp_path / "data" / "demos.jsonl").exists()
