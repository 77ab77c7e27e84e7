"""The GRPO command line built by the library (the demo and the shell launchers run it): no checkout path."""

import json
import subprocess
import sys

import pytest

from textwm.rl.launch import PLUGIN, GRPOConfig


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_argv_and_environment(tmp_path, monkeypatch):
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps({"task_id": "boil_v0"}) + "\n")
    monkeypatch.setenv("SCIWORLD_WM_GUARD", "0")
    config = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, max_turns=3, wm_max_tokens=16, swift="swift")
    argv = config.argv(["--max_steps", "1"])
    assert argv[:4] == ["swift", "rlhf", "--rlhf_type", "grpo"] and argv[-2:] == ["--max_steps", "1"]
    assert _flag(argv, "--external_plugins") == str(PLUGIN) and PLUGIN.is_file() and "textwm" in PLUGIN.parts
    assert (_flag(argv, "--multi_turn_scheduler"), _flag(argv, "--reward_funcs")) == ("sciworld_scheduler",
                                                                                      "sciworld_reward")
    assert (_flag(argv, "--use_vllm"), _flag(argv, "--torch_dtype"), _flag(argv, "--max_turns")) == ("false",
                                                                                                   "float32", "3")
    assert _flag(argv, "--output_dir") == "runs/sciworld/sciworld_grpo"
    env = config.environ()
    assert (env["SCIWORLD_WM_GUARD"], env["CUDA_VISIBLE_DEVICES"], env["WM_MAX_TOKENS"]) == ("0", "", "16")
    gpu = GRPOConfig(env="sciworld", data=str(data), num_gpus=4, swift="swift")
    assert _flag(gpu.argv(), "--vllm_mode") == "colocate" and gpu.environ()["NPROC_PER_NODE"] == "4"


def test_the_world_models_sampling_is_set_checked_and_recorded(tmp_path, monkeypatch):
    from textwm.config import ConfigError
    from textwm.rl.launch import CONFIG_RECORD, record_config

    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    monkeypatch.setenv("WM_TOP_P", "0.5")           # inherited from the shell: not the config's, so not passed on
    config = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift", output_dir=str(tmp_path / "run"))
    env = config.environ()
    assert env["WM_TEMPERATURE"] == "0.7" and "WM_TOP_P" not in env and "WM_DIFFUSION_STEPS" not in env
    sampled = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift", wm_temperature=1.0, wm_top_p=0.9,
                         wm_diffusion_steps=4, output_dir=str(tmp_path / "run"))
    env = sampled.environ()
    assert (env["WM_TEMPERATURE"], env["WM_TOP_P"], env["WM_DIFFUSION_STEPS"]) == ("1", "0.9", "4")
    recorded = json.loads(record_config(sampled).read_text())
    assert record_config(sampled) == tmp_path / "run" / CONFIG_RECORD
    assert (recorded["wm_temperature"], recorded["wm_top_p"], recorded["wm_diffusion_steps"]) == (1.0, 0.9, 4)
    for key, value in (("wm_temperature", -0.1), ("wm_top_p", 0.0), ("wm_diffusion_steps", 0)):
        with pytest.raises(ConfigError, match=key.upper()):
            GRPOConfig(env="sciworld", data=str(data), **{key: value})


def test_real_rollouts_are_a_checked_switch_that_reaches_the_scheduler(tmp_path, monkeypatch):
    from textwm.config import ConfigError
    from textwm.envs import get_env
    from textwm.rl.real_rollouts import real_rollouts_from_env, rollout_env

    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    monkeypatch.setenv("TEXTWM_REAL_ENV_URL", "http://stale:1")     # inherited: never passed on
    wm = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift")
    assert wm.environ()["TEXTWM_ROLLOUT_ENV"] == "wm" and "TEXTWM_REAL_ENV_URL" not in wm.environ()
    real = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift", rollout_env="real",
                      real_env_url="http://127.0.0.1:30003")
    env = real.environ()
    assert (env["TEXTWM_ROLLOUT_ENV"], env["TEXTWM_REAL_ENV_URL"]) == ("real", "http://127.0.0.1:30003")
    assert int(env["TEXTWM_REAL_SESSIONS"]) >= 64
    monkeypatch.setenv("SCIWORLD_ENV_URL", "http://replay:1")     # a replay switch left in the shell: not applied
    assert real.resolved().env_url == "" and "SCIWORLD_ENV_URL" not in real.environ()
    assert real_rollouts_from_env(get_env("sciworld"), env).url == "http://127.0.0.1:30003"
    assert real_rollouts_from_env(get_env("sciworld"), wm.environ()) is None
    with pytest.raises(ConfigError, match="--real-env-url"):
        GRPOConfig(env="sciworld", data=str(data), rollout_env="real")
    with pytest.raises(ConfigError, match="would play it twice"):
        GRPOConfig(env="sciworld", data=str(data), rollout_env="real", real_env_url="http://h:1", env_url="http://h:2")
    with pytest.raises(ValueError, match="use wm or real"):
        rollout_env({"TEXTWM_ROLLOUT_ENV": "simulator"})
    with pytest.raises(ValueError, match="needs \\$TEXTWM_REAL_ENV_URL"):
        real_rollouts_from_env(get_env("sciworld"), {"TEXTWM_ROLLOUT_ENV": "real"})
    with pytest.raises(ValueError, match="TEXTWM_REAL_SESSIONS"):
        real_rollouts_from_env(get_env("sciworld"), {"TEXTWM_ROLLOUT_ENV": "real", "TEXTWM_REAL_ENV_URL": "http://h:1",
                                                     "TEXTWM_REAL_SESSIONS": "0"})


def test_groups_per_step_dynamic_sampling_and_the_step_metrics(tmp_path, monkeypatch):
    from textwm.config import ConfigError

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    config = GRPOConfig(env="sciworld", data=str(data), num_gpus=1, swift="swift", per_device_train_batch_size=4,
                        tasks_per_step=4)            # 4 tasks x 8 generations = 32 episodes = 4 a pass x 8 passes
    argv = config.argv()
    assert _flag(argv, "--gradient_accumulation_steps") == "8" and config.tasks_per_optimizer_step() == 4
    assert (_flag(argv, "--dynamic_sample"), _flag(argv, "--max_resample_times")) == ("true", "3")
    assert (_flag(argv, "--log_entropy"), _flag(argv, "--report_to")) == ("true", "tensorboard")
    assert GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift").tasks_per_optimizer_step() == 1
    with pytest.raises(ConfigError, match="TASKS_PER_STEP"):
        GRPOConfig(env="sciworld", data=str(data), num_gpus=1, per_device_train_batch_size=3, tasks_per_step=1).argv()
    with pytest.raises(ConfigError, match="whole groups of 8"):
        GRPOConfig(env="sciworld", data=str(data), num_gpus=1, grad_accum_steps=4).argv()


def test_the_knobs_come_from_the_environment(tmp_path):
    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    env = {"DATA": str(data), "NUM_GPUS": "0", "LR": "3e-6", "MAX_TURNS": "7", "SWIFT": "my-swift", "PATH": "/usr/bin"}
    res = subprocess.run([sys.executable, "-m", "textwm.rl.launch", "--env", "sciworld", "--print-command"],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    argv = res.stdout.split()
    assert (argv[0], _flag(argv, "--learning_rate"), _flag(argv, "--max_turns")) == ("my-swift", "3e-06", "7")
    bad = subprocess.run([sys.executable, "-m", "textwm.rl.launch", "--env", "sciworld"], capture_output=True,
                         text=True, env={**env, "DATA": str(tmp_path / "nope.jsonl")}, check=False)
    assert bad.returncode == 2 and "DATA" in bad.stderr and "build_wm_dataset.py" in bad.stderr


def test_swift_model_args_follow_the_agents_architecture(tmp_path):
    from textwm.config import ConfigError
    from textwm.rl.launch import swift_model_args

    for model_type, expected in (("qwen3", ("qwen3", "qwen3")), ("llama", ("llama", "chatml"))):
        (tmp_path / model_type).mkdir()
        (tmp_path / model_type / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert swift_model_args(tmp_path / model_type) == expected
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="model_type 'gpt2'.*--model-type and --template"):
        swift_model_args(tmp_path / "gpt2")


def test_weights_stay_float32_unless_deepspeed_keeps_a_float32_copy(tmp_path):
    """An optimizer stepping bfloat16 weights itself rounds away steps below ~1/256 of a weight: at GRPO rates the
    agent does not move. So on GPU the weights are float32 (bf16 compute) unless DeepSpeed holds master weights,
    and forcing bfloat16 without it is flagged."""
    from textwm.rl.launch import low_precision_weights

    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps({"task_id": "boil_v0"}) + "\n")
    gpu = GRPOConfig(env="sciworld", data=str(data), num_gpus=1, swift="swift")
    argv = gpu.argv()
    assert (_flag(argv, "--torch_dtype"), _flag(argv, "--bf16"), _flag(argv, "--fp16")) == ("float32", "true", "false")
    assert not low_precision_weights(gpu)
    zero = GRPOConfig(env="sciworld", data=str(data), num_gpus=2, deepspeed="zero2", swift="swift")
    assert _flag(zero.argv(), "--torch_dtype") == "bfloat16" and "--bf16" not in zero.argv()
    assert not low_precision_weights(zero)
    forced = GRPOConfig(env="sciworld", data=str(data), num_gpus=1, torch_dtype="bfloat16", swift="swift")
    assert low_precision_weights(forced) and "--bf16" not in forced.argv()
    cpu = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift")
    assert _flag(cpu.argv(), "--torch_dtype") == "float32" and "--bf16" not in cpu.argv()
