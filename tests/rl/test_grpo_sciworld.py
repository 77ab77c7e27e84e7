"""The ScienceWorld run scripts, and real `swift rlhf --rlhf_type grpo` inside a real world-model stack.

Fast: every run script refuses a missing DATA file by name. Slow: RL rows and SFT demos built from the
real ScienceWorld env (boil, melt), a tiny random Qwen3 agent, a tiny random SDAR world model served by
the native server behind the WM proxy on free loopback ports; then run_sciworld_qwen3_grpo.sh (two
GRPO steps, 2 generations x 3 turns, CPU) and run_sciworld_qwen3_sft.sh (one step).
"""

from __future__ import annotations

import json

import pytest

from tests.rl import stack

SCRIPTS = [f"run_sciworld_{m}_{k}.sh" for m in ("qwen3", "lfm", "mistral") for k in ("sft", "grpo")]


def run_script(script: str, *args: str, env: dict[str, str], timeout: float = 300):
    return stack.run_script("sciworld", script, *args, env=env, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_name_a_missing_data_file(script, tmp_path):
    res = run_script(script, env={"DATA": str(tmp_path / "nope.jsonl")})
    assert res.returncode == 2, res.stderr
    assert "DATA" in res.stderr and "nope.jsonl" in res.stderr and "build_wm_dataset.py" in res.stderr


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

    rows = read_jsonl(sciworld_data / "rl_train.jsonl").rows + read_jsonl(sciworld_data / "sft_train.jsonl").rows
    return stack.tiny_agent(rows, tmp_path_factory.mktemp("agent"))


@pytest.fixture(scope="module")
def wm_stack(sciworld_data, tmp_path_factory):
    from textwm.data.jsonl import read_jsonl

    with stack.wm_stack(read_jsonl(sciworld_data / "wm_train.jsonl").rows, tmp_path_factory.mktemp("stack")) as url:
        yield url


@pytest.mark.slow
def test_grpo_two_steps_inside_the_world_model(sciworld_data, tiny_agent, wm_stack, tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    out = tmp_path / "grpo"
    res = run_script("run_sciworld_qwen3_grpo.sh", "--max_steps", "2", env={
        **stack.TINY_GRPO, "MODEL_PATH": str(tiny_agent), "WM_ENDPOINT": wm_stack,
        "DATA": str(sciworld_data / "rl_train.jsonl"), "OUTPUT_DIR": str(out)})
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
def test_grpo_with_real_rollouts_and_dynamic_sampling(sciworld_data, tiny_agent, tmp_path):
    """ROLLOUT_ENV=real through swift: every action stepped in a real env server (JVMs), the reward from the real
    trajectory, groups without reward spread regenerated (one round at most here) and counted per batch."""
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from tests.loopback import serving
    from textwm.envs import get_env
    from textwm.envs.pool import PoolConfig
    from textwm.envs.server import create_env_app

    out = tmp_path / "grpo"
    with serving(create_env_app(get_env("sciworld"), PoolConfig(workers=2, max_sessions_per_worker=4))) as url:
        res = run_script("run_sciworld_qwen3_grpo.sh", "--max_steps", "1", env={
            **stack.TINY_GRPO, "DYNAMIC_SAMPLE": "true", "MAX_RESAMPLE_TIMES": "1", "ROLLOUT_ENV": "real",
            "REAL_ENV_URL": url, "MODEL_PATH": str(tiny_agent), "DATA": str(sciworld_data / "rl_train.jsonl"),
            "OUTPUT_DIR": str(out)}, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "rollouts in the real env at " + url in res.stdout + res.stderr
    (run,) = out.glob("v*-*")
    episodes = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    batches = [json.loads(x) for x in (run / "reward_batches.jsonl").read_text().splitlines()]
    # One step of one task x 2 generations; a second round only when the first had no reward spread.
    assert [b["groups"] for b in batches] == [1] * len(batches) and len(episodes) == 2 * len(batches) <= 4
    assert len(batches) == 1 + batches[0]["zero_spread_groups"]
    for x in episodes:
        assert set(x["sources"]) <= {"real", "feedback"} and x["reward_source"] == "real env" and not x["wm_error"]
        assert x["end_reason"] != "env_error"
    recorded = json.loads((out / "textwm_grpo_config.json").read_text())
    assert (recorded["rollout_env"], recorded["dynamic_sample"]) == ("real", True)


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


@pytest.mark.slow
def test_grpo_step_with_the_pretrained_smollm2_agent(sciworld_data, wm_stack, tmp_path):
    """SmolLM2-135M-Instruct (a Llama, textwm.models.pretrained) as the agent: swift's llama model type and chatml
    template, one GRPO step inside the world model."""
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from textwm.models.pretrained import pretrained_path
    from textwm.rl.launch import swift_model_args

    agent = pretrained_path("smollm2-135m-instruct")
    model_type, template = swift_model_args(agent)
    out = tmp_path / "grpo"
    res = run_script("run_sciworld_qwen3_grpo.sh", "--max_steps", "1", env={
        **stack.TINY_GRPO, "MODEL_PATH": str(agent), "MODEL_TYPE": model_type, "TEMPLATE": template,
        "WM_ENDPOINT": wm_stack, "DATA": str(sciworld_data / "rl_train.jsonl"), "OUTPUT_DIR": str(out)}, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = out.glob("v*-*")
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(x["turns"] >= 1 and not x["wm_error"] for x in lines)
    logs = [json.loads(x) for x in (run / "logging.jsonl").read_text().splitlines()]
    assert any("rewards/SciWorldReward/mean" in r for r in logs)
