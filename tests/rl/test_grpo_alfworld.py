"""The ALFWorld run scripts, and real `swift rlhf --rlhf_type grpo` inside a real world-model stack.

Fast: every run script refuses a missing DATA file by name. Slow: a row in the paper's format (the
released rows need no env to train on: the scene and the goal are in the row), a tiny random Qwen3
agent, a tiny random SDAR world model on the native server behind the WM proxy on free loopback ports;
run_alfworld_qwen3_grpo.sh with ALFWORLD_WM_GUARD=0 (every step to the world model): two GRPO steps,
2 generations x 3 turns, CPU.
"""

from __future__ import annotations

import json

import pytest

from tests.envs.alfworld.test_rows import paper_row
from tests.rl import stack

SCRIPTS = ["run_alfworld_lfm_grpo.sh", "run_alfworld_qwen3_grpo.sh", "run_alfworld_mistral_grpo.sh",
           "run_alfworld_mistral_sft.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_name_a_missing_data_file(script, tmp_path):
    res = stack.run_script("alfworld", script, env={"DATA": str(tmp_path / "nope.jsonl")})
    assert res.returncode == 2, res.stderr
    assert "DATA" in res.stderr and "nope.jsonl" in res.stderr


@pytest.mark.slow
def test_grpo_two_steps_inside_the_world_model(tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")
    rows = [paper_row(), paper_row(task_type="pick_and_place_simple",
                                   wm_system_prompt=paper_row()["wm_system_prompt"]
                                   .replace("Task: put two mug in sidetable.", "Task: put a mug in sidetable.")
                                   .replace("pick_two_obj_and_place", "pick_and_place_simple")
                                   .replace(", needs_two=true", ""))]
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wm_rows = [{"messages": [{"role": "system", "content": r["wm_system_prompt"]},
                             {"role": "user", "content": r["messages"][1]["content"]},
                             {"role": "assistant", "content": "You arrive at countertop 1. On the countertop 1, you "
                                                              "see a apple 1, and a mug 1."}]} for r in rows]
    agent = stack.tiny_agent(rows, tmp_path / "agent")
    out = tmp_path / "grpo"
    with stack.wm_stack(wm_rows, tmp_path / "stack") as wm:
        res = stack.run_script("alfworld", "run_alfworld_qwen3_grpo.sh", "--max_steps", "2", env={
            **stack.TINY_GRPO, "MODEL_PATH": str(agent), "WM_ENDPOINT": wm, "ALFWORLD_WM_GUARD": "0",
            "DATA": str(data), "OUTPUT_DIR": str(out), "NUM_GPUS": "0", "DEEPSPEED": ""})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = out.glob("v*-*")
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and {x["env"] for x in lines} == {"alfworld"}
    for x in lines:
        assert x["end_reason"] and isinstance(x["reward"], float) and -1 <= x["reward"] <= 1 and not x["wm_error"]
        assert set(x["sources"]) <= {"wm", "feedback"}  # the guard is off: no local answers
    assert any("wm" in x["sources"] for x in lines)
    logs = [json.loads(x) for x in (run / "logging.jsonl").read_text().splitlines()]
    assert len([r for r in logs if "rewards/AlfWorldReward/mean" in r]) == 2
