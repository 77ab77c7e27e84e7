"""sciworld/data/create_sciworld_splits.py: the paper's split rule and row format, rows that GRPO's loading takes
(completed by the start-state cache). Slow: real ScienceWorld JVMs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from textwm.envs import get_env
from textwm.envs.sciworld.agent import AGENT_SYSTEM_PROMPT
from textwm.envs.sciworld.paper_splits import paper_variations
from textwm.envs.sim_cache import SimTaskCache

ROOT = Path(__file__).resolve().parents[3]


def test_split_rule_keeps_new_draws_then_fills_from_zero():
    train, test = paper_variations(iter([5, 5, 5] * 4).__next__, iter([5, 7, 7, 8] * 3).__next__, 10)
    assert sorted(train) == [0, 5] and sorted(test) == [7, 8]      # test never takes a train variation (5)


@pytest.mark.slow
def test_script_writes_the_papers_files_that_grpo_loads(tmp_path):
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs java")
    done = subprocess.run([sys.executable, str(ROOT / "sciworld/data/create_sciworld_splits.py"), "--tasks",
                           "lifespan-longest-lived", "--out-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Created 2 RL tasks and 2 test tasks" in done.stdout
    assert (tmp_path / "sciworld_test_split.jsonl").is_file()          # held out: not read here
    rows = [json.loads(x) for x in (tmp_path / "sciworld_rl_split.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["lifespan-longest-lived_v2", "lifespan-longest-lived_v51"]  # the release's
    for row in rows:
        assert list(row) == ["messages", "task_id", "instruction", "ground_truth", "wm_system_prompt", "max_turns"]
        assert row["ground_truth"] == "" and row["max_turns"] == 50 and isinstance(row["messages"], str)
        system, user = json.loads(row["messages"])
        assert system == {"role": "system", "content": AGENT_SYSTEM_PROMPT}
        assert user["content"].startswith(f"Task: {row['instruction']}\n\nYou are in: This room is called")
    spec = get_env("sciworld")                                           # GRPO's loading (EpisodeDriver.begin)
    completed = SimTaskCache(spec, tmp_path / "cache", progress=False).complete(rows)
    for row in completed:
        start = spec.load_row(row, need_sim=True)
        assert start.sim_task.task_id == row["task_id"] and start.max_turns == 50
        assert start.messages[0]["content"] == AGENT_SYSTEM_PROMPT
