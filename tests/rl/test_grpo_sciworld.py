"""The ScienceWorld run scripts, and real `swift rlhf --rlhf_type grpo` inside a real world-model stack.

Fast: every run script refuses a missing DATA file by name. Slow: RL rows and SFT demos built from the
real ScienceWorld env (boil, melt), a tiny random Qwen3 agent, a tiny random SDAR world model served by
the native server behind the WM proxy on free loopback ports; then run_sciworld_qwen3_grpo.sh (two
GRPO steps, 2 generations x 3 turns, CPU) and run_sciworld_qwen3_sft.sh (one step).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPTS = [f"run_sciworld_{m}_{k}.sh" for m in ("qwen3", "lfm", "mistral") for k in ("sft", "grpo")]


def run_script(script: str, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``bash sciworld/<script> ARGS`` on CPU with the test venv's swift, nothing reported."""
    full_env = {**os.environ, "SWIFT": str(Path(sys.executable).parent / "swift"), "NUM_GPUS": "0",
                "REPORT_TO": "none", "DATASET_NUM_PROC": "1", "DATALOADER_NUM_WORKERS": "0", **env}
    return subprocess.run(["bash", str(REPO / "sciworld" / script), *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_name_a_missing_data_file(script, tmp_path):
    res = run_script(script, env={"DATA": str(tmp_path / "nope.jsonl")})
    assert res.returncode == 2, res.stderr
    assert "DATA" in res.stderr and "nope.jsonl" in res.stderr and "build_wm_dataset.py" in res.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sciworld_data(tmp_path_factory):
    pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
    from textwm.envs.build import build
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    out = tmp_path_factory.mktemp("sciworld_data")
    build("sciworld", SciWorldBuildConfig(out_dir=str(out), tasks=("boil", "melt"), train_variations=1,
                                          dev_variations=0, test_variations=0, explore_episodes=0, workers=2))
    return out


@pytest.fixture(scope="module")
def tiny_agent(sciworld_data, tmp_path_factory):
    from textwm.data.jsonl import read_jsonl
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts

    rows = read_jsonl(sciworld_data / "rl_train.jsonl").rows + read_jsonl(sciworld_data / "sft_train.jsonl").rows
    return build_tiny_checkpoint(tmp_path_factory.mktemp("agent"), list(chat_texts(rows)), family="ar",
                                 size="tiny", vocab_size=1024, seed=3)


@pytest.fixture(scope="module")
def wm_stack(sciworld_data, tmp_path_factory):
    """A tiny SDAR world model on the native server, behind the WM proxy; yields the proxy URL."""
    from textwm.data.jsonl import read_jsonl
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts
    from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

    wm_rows = read_jsonl(sciworld_data / "wm_train.jsonl").rows
    wm = build_tiny_checkpoint(tmp_path_factory.mktemp("wm"), list(chat_texts(wm_rows)), family="sdar",
                               size="tiny", block_size=4, vocab_size=1024, seed=4)
    run_dir = tmp_path_factory.mktemp("stack")
    server_port, proxy_port = free_port(), free_port()
    server, proxy = ManagedProcess("server", run_dir), ManagedProcess("proxy", run_dir)
    spec = BackendSpec(backend="native", model_path=str(wm), port=server_port, served_model_name="tiny-wm",
                       device="cpu", max_model_len=4096)
    try:
        server.start([*server_command(spec), "--temperature", "0", "--max-tokens", "16"])
        server.wait_healthy(f"http://127.0.0.1:{server_port}/health", 120)
        proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"), "--max-retries", "1",
                     "--timeout", "60"])
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        yield f"http://127.0.0.1:{proxy_port}/"
    finally:
        proxy.stop()
        server.stop()


@pytest.mark.slow
def test_grpo_two_steps_inside_the_world_model(sciworld_data, tiny_agent, wm_stack, tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    out = tmp_path / "grpo"
    res = run_script("run_sciworld_qwen3_grpo.sh", "--max_steps", "2", env={
        "MODEL_PATH": str(tiny_agent), "MODEL_TYPE": "qwen3", "TEMPLATE": "qwen3", "WM_ENDPOINT": wm_stack,
        "WM_MAX_TOKENS": "16", "WM_MAX_RETRIES": "1", "DATA": str(sciworld_data / "rl_train.jsonl"),
        "OUTPUT_DIR": str(out), "NUM_GENERATIONS": "2", "PER_DEVICE_TRAIN_BATCH_SIZE": "2", "GRAD_ACCUM_STEPS": "1",
        "MAX_TURNS": "3", "MAX_COMPLETION_LENGTH": "16", "MAX_LENGTH": "4096", "SAVE_STEPS": "100"})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = out.glob("v*-*")
    # The trajectory log: one line per episode (2 steps x 2 prompts-with-generations), several turns each.
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    assert {x["task_id"] for x in lines} <= {"boil_v0", "melt_v0"}
    for x in lines:
        assert len(x["actions"]) == x["turns"] >= 2 and len(x["observations"]) == len(x["sources"]) == x["turns"]
        assert x["end_reason"] and isinstance(x["reward"], float) and -1 <= x["reward"] <= 1
        assert set(x["sources"]) <= {"local", "wm", "feedback"} and not x["wm_error"]
    assert any("wm" in x["sources"] for x in lines)  # the world model answered through the proxy
    # ms-swift logged the rewards of our ORM and the number of turns.
    logs = [json.loads(x) for x in (run / "logging.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "rewards/SciWorldReward/mean" in r]
    assert len(steps) == 2 and all(r["num_turns"] >= 2 for r in steps)
    assert "SciWorldScheduler: world model at " + wm_stack in res.stdout + res.stderr


@pytest.mark.slow
def test_sft_one_step(sciworld_data, tiny_agent, tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    res = run_script("run_sciworld_qwen3_sft.sh", "--max_steps", "1", env={
        "MODEL_PATH": str(tiny_agent), "MODEL_TYPE": "qwen3", "TEMPLATE": "qwen3",
        "DATA": str(sciworld_data / "sft_train.jsonl"), "OUTPUT_DIR": str(tmp_path / "sft"), "GRAD_ACCUM_STEPS": "1"})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = (tmp_path / "sft").glob("v*-*")
    assert (run / "checkpoint-1" / "config.json").is_file()
    assert any("loss" in json.loads(x) for x in (run / "logging.jsonl").read_text().splitlines())
