"""The paper's released RL rows through GRPO and in-WM evaluation, the world model queried in the paper's layout.

Opt-in: the released files are not in this repository. Set ``TEXTWM_PAPER_DATA`` to the folder that holds them
(``alfworld_rl.jsonl``, ``appworld_rl_split_clean.jsonl``, ``sciworld_rl_split.jsonl``); each env's case is
skipped otherwise. Per env, the first two rows as released: real ``swift rlhf --rlhf_type grpo`` (two steps, a
tiny random agent, CPU) with ``<ENV>_WM_PROMPT=paper`` and the guard off, so every step goes to the world model;
then the in-WM evaluation CLI on the same rows with a scripted agent. The world model is a recording endpoint on
loopback: every query it gets must be in the paper's layout, its state the agent's own conversation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.eval.helpers import ChatServer, GoldWM
from tests.rl import stack
from textwm.envs.alfworld import paper_prompt as alfworld_paper

pytestmark = pytest.mark.slow

#: env -> (the released file, its GRPO run script, what its paper-layout system prompt starts with, a reply
#: the scripted agent gives at every turn, the recording world model's answer to anything)
CASES = {
    "alfworld": ("alfworld_rl.jsonl", "run_alfworld_qwen3_grpo.sh", f"## ENVIRONMENT STATE\n{alfworld_paper.IDENTITY}",
                 "Think: I look around first.\nAction: look", "Nothing happens."),
    "appworld": ("appworld_rl_split_clean.jsonl", "run_qwen_grpo.sh",
                 "## ENVIRONMENT STATE\nThe environment is AppWorld tool-response prediction.",
                 '[{"name": "supervisor__show_profile", "parameters": {}}]',
                 '{"first_name": "Ann", "last_name": "Lee", "email": "ann@example.com"}'),
    "sciworld": ("sciworld_rl_split.jsonl", "run_sciworld_qwen3_grpo.sh",
                 "## ENVIRONMENT STATE\nScienceWorld is a text-based interactive", "look around",
                 "This room is called the kitchen."),
}


def released_rows(env: str, tmp_path: Path, n: int = 2) -> Path:
    root = os.environ.get("TEXTWM_PAPER_DATA")
    if not root:
        pytest.skip("TEXTWM_PAPER_DATA is not set (the folder of the paper's released RL rows)")
    source = Path(root) / CASES[env][0]
    if not source.is_file():
        pytest.skip(f"{source} does not exist")
    with source.open(encoding="utf-8") as f:
        lines = [next(f) for _ in range(n)]
    rows = tmp_path / source.name
    rows.write_text("".join(lines), encoding="utf-8")
    return rows


def assert_paper_queries(wm: GoldWM, env: str) -> int:
    """Every query so far is in the paper's layout; how many there were."""
    queries = [body["input"] for method, _, body in wm.requests if method == "POST"]
    for query in queries:
        assert query["system_prompt"].startswith(CASES[env][2]), query["system_prompt"][:200]
        conversation = json.loads(query["state"])        # the paper's state: the agent's conversation so far
        assert isinstance(conversation, list) and conversation[0]["role"] == "system"
    return len(queries)


@pytest.mark.parametrize("env", sorted(CASES))
def test_released_rows_play_in_grpo_and_in_wm_evaluation_with_the_papers_query(env, tmp_path, monkeypatch, capsys):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from textwm.eval.run import main as eval_main

    rows = released_rows(env, tmp_path)
    _, script, _, reply, answer = CASES[env]
    prefix = env.upper()
    knobs = {f"{prefix}_WM_PROMPT": "paper", f"{prefix}_WM_GUARD": "0",
             "TEXTWM_SIM_CACHE": str(tmp_path / "sim_cache")}
    wm = GoldWM([], fallback=lambda action: answer)
    try:
        agent_rows = [json.loads(line) for line in rows.read_text().splitlines()]
        for row in agent_rows:
            if isinstance(row["messages"], str):
                row["messages"] = json.loads(row["messages"])
        agent = stack.tiny_agent(agent_rows, tmp_path / "agent")
        out = tmp_path / "grpo"
        res = stack.run_script(env, script, "--max_steps", "2", env={
            **stack.TINY_GRPO, **knobs, "MODEL_PATH": str(agent), "WM_ENDPOINT": wm.url, "DATA": str(rows),
            "OUTPUT_DIR": str(out), "NUM_GPUS": "0", "DEEPSPEED": ""}, timeout=900)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
        (run,) = out.glob("v*-*")
        episodes = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
        assert len(episodes) == 4 and {x["env"] for x in episodes} == {env}
        # A tiny random agent rarely writes an AppWorld call, so its episodes may never reach the world model.
        assert not any(x["wm_error"] for x in episodes)
        grpo_queries = assert_paper_queries(wm, env)
        assert grpo_queries == sum(x["sources"].count("wm") for x in episodes)

        for name, value in knobs.items():
            monkeypatch.setenv(name, value)
        scripted = ChatServer(lambda messages: reply)
        try:
            assert eval_main(["agent-wm", "--rows", str(rows), "--agent-url", scripted.url, "--wm-endpoint", wm.url,
                              "--max-turns", "3", "--output-dir", str(tmp_path / "eval")], env=env) == 0, \
                capsys.readouterr().err
        finally:
            scripted.close()
        evaluated = [json.loads(x) for x in (tmp_path / "eval" / "episodes_wm.jsonl").read_text().splitlines()]
        assert len(evaluated) == 2 and all(e["reason"] != "wm_error" for e in evaluated)
        assert assert_paper_queries(wm, env) > grpo_queries
    finally:
        wm.close()
