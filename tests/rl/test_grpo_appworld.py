"""The AppWorld run scripts, and the paper's SFT -> GRPO pipeline with real `swift sft` / `swift rlhf` on CPU.

Fast: every run script refuses a missing DATA file by name. Slow: hand-written rows in the paper's format (the
world is in the row: no app runs), a tiny random Qwen3 agent first fine-tuned by run_lfm25_sft_grpo_v2.sh on a
demo (so that its replies parse as tool calls), then two GRPO steps inside a tiny random SDAR world model on the
native server behind the WM proxy, with APPWORLD_WM_GUARD=0 (every call to the world model) and the queries in the
paper's layout (APPWORLD_WM_PROMPT=paper; the demo's GRPO runs ours).
"""

from __future__ import annotations

import json

import pytest

from tests.envs.appworld import fixtures as fx
from tests.rl import stack

SCRIPTS = ["run_qwen_grpo.sh", "run_lfm25_grpo.sh", "run_mistral_grpo.sh", "run_qwen_sft.sh", "run_lfm25_sft.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_name_a_missing_data_file(script, tmp_path):
    res = stack.run_script("appworld", script, env={"DATA": str(tmp_path / "nope.jsonl")})
    assert res.returncode == 2, res.stderr
    assert "DATA" in res.stderr and "nope.jsonl" in res.stderr


def test_the_pipeline_needs_its_demos(tmp_path):
    res = stack.run_script("appworld", "run_lfm25_sft_grpo_v2.sh", env={"SFT_DATA": ""})
    assert res.returncode != 0 and "SFT_DATA" in res.stderr


@pytest.mark.slow
def test_sft_then_grpo_inside_the_world_model(tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    rows = [fx.rl_row(), fx.rl_row(task_id="a1b2c3d_2")]
    data, demos = tmp_path / "rl.jsonl", tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    demos.write_text(json.dumps(fx.demo_row()) + "\n")
    wm_rows = [{"messages": [{"role": "system", "content": fx.WORLD_TEXT},
                             {"role": "user", "content": f"State: Logged in: none\n\nAction: {a}"},
                             {"role": "assistant", "content": o}]} for a, o in fx.DEMO_STEPS]
    agent = stack.tiny_agent([*rows, fx.demo_row()], tmp_path / "agent")
    out = tmp_path / "grpo"
    with stack.wm_stack(wm_rows, tmp_path / "stack") as wm:
        res = stack.run_script("appworld", "run_lfm25_sft_grpo_v2.sh", "--max_steps", "2", env={
            **stack.TINY_GRPO, "MODEL_PATH": str(agent), "WM_ENDPOINT": wm, "APPWORLD_WM_GUARD": "0",
            "APPWORLD_WM_PROMPT": "paper",
            "SFT_DATA": str(demos), "SFT_OUTPUT_DIR": str(tmp_path / "sft"), "SFT_LR": "3e-3", "SFT_EPOCHS": "100", "LR_SCHED": "constant",
            "SFT_ARGS": "--save_only_model true", "GRAD_ACCUM_STEPS": "1",
            "DATA": str(data), "OUTPUT_DIR": str(out), "NUM_GPUS": "0", "DEEPSPEED": "", "MAX_LENGTH": "4096",
            "VLLM_MAX_MODEL_LEN": "4096", "MAX_COMPLETION_LENGTH": "40", "TEMPERATURE": "0.1"}, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = out.glob("v*-*")
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and {x["env"] for x in lines} == {"appworld"}
    for x in lines:
        assert x["end_reason"] and isinstance(x["reward"], float) and 0 <= x["reward"] <= 1 and not x["wm_error"]
        assert set(x["sources"]) <= {"wm", "feedback"}  # the guard is off: no local answers
    assert any("wm" in x["sources"] for x in lines), [x["sources"] for x in lines]
    logs = [json.loads(x) for x in (run / "logging.jsonl").read_text().splitlines()]
    assert len([r for r in logs if "rewards/AppWorldReward/mean" in r]) == 2
