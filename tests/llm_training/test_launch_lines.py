"""llm_training/train.sh and eval.sh are shims of textwm.training.swift_sft / swift_eval: their swift lines are the
ones the scripts built in bash before (written out below, as those scripts printed them for the same knobs), and
every knob keeps its environment variable and its meaning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from textwm.config import ConfigCLI, ConfigError, leaves
from textwm.swift_launch import swift_number
from textwm.training.swift_eval import EvalLossConfig
from textwm.training.swift_sft import ARSFTConfig

#: Every knob llm_training/train.sh and eval.sh read (the README's tables).
TRAIN_KNOBS = ("MODEL MODEL_TYPE TEMPLATE USE_HF DATA_DIR TRAIN_FILE VAL_FILE RUN_NAME OUTPUT_DIR NUM_GPUS "
               "MASTER_PORT TORCH_DTYPE ATTN_IMPL PACKING DEEPSPEED EPOCHS PER_DEVICE_TRAIN_BATCH_SIZE "
               "PER_DEVICE_EVAL_BATCH_SIZE GRAD_ACCUM_STEPS LR WEIGHT_DECAY WARMUP_RATIO LR_SCHED MAX_LEN "
               "GRADIENT_CHECKPOINTING EVAL_STEPS SAVE_STEPS SAVE_TOTAL_LIMIT LOGGING_STEPS DATASET_NUM_PROC "
               "DATALOADER_NUM_WORKERS REPORT_TO CHECK_MODEL SEED SWIFT").split()
EVAL_KNOBS = ("MODEL_DIR MODEL_TYPE TEMPLATE USE_HF DATA_DIR VAL_FILE EVAL_FILES OUTPUT_DIR NUM_GPUS MASTER_PORT "
              "TORCH_DTYPE ATTN_IMPL PACKING DEEPSPEED MAX_LEN PER_DEVICE_EVAL_BATCH_SIZE DATASET_NUM_PROC "
              "DATALOADER_NUM_WORKERS CHECK_MODEL SWIFT").split()


def nproc_16() -> int:
    """The scripts' DATASET_NUM_PROC default, as bash computed it: min(nproc, 16)."""
    return min(int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout), 16)


def print_command(script: str, *args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``bash llm_training/<script> --print-command ARGS`` with only ``env`` (plus PATH, this Python) set."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHON": sys.executable, "SWIFT": "swift",
            **{k: os.environ[k] for k in ("PYTHONPATH", "HOME") if k in os.environ}, **env}
    return subprocess.run(["bash", str(REPO / "llm_training" / script), "--print-command", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def root(tmp_path) -> Path:
    """A TEXTWM_ROOT with runs/ar_data/{train,test,ood}.jsonl and a train.sh run folder of three versions."""
    data = tmp_path / "runs" / "ar_data"
    data.mkdir(parents=True)
    for name in ("train", "test", "ood"):
        (data / f"{name}.jsonl").write_text('{"messages": []}\n')
    run = tmp_path / "runs" / "llm_training" / "ar_sft"
    for version, step in (("v1-20250102-000000", 2), ("v10-20250103-000000", 5), ("v9-20250101-000000", 1)):
        (run / version / f"checkpoint-{step}").mkdir(parents=True)
        (run / version / f"checkpoint-{step}" / "config.json").write_text("{}")
        (run / version / "last-checkpoint").symlink_to(f"checkpoint-{step}")
    return tmp_path


def test_train_lines_are_the_bash_scripts_on_cpu_and_on_8_gpus(root):
    r, d = root, root / "runs" / "ar_data"
    cpu = print_command("train.sh", "--max_steps", "1", env={
        "TEXTWM_ROOT": str(r), "NUM_GPUS": "0", "MODEL": "runs/tiny_ar", "MODEL_TYPE": "qwen3", "TEMPLATE": "qwen3",
        "REPORT_TO": "none", "DATASET_NUM_PROC": "1", "DATALOADER_NUM_WORKERS": "0"})
    assert cpu.returncode == 0, cpu.stderr
    assert cpu.stdout.splitlines() == [
        f"swift sft --model runs/tiny_ar --use_hf true --check_model false --tuner_type full --dataset {d}/train.jsonl "
        "--torch_dtype float32 --attn_impl sdpa --packing false --max_length 8192 --num_train_epochs 2 "
        "--per_device_train_batch_size 2 --per_device_eval_batch_size 2 --gradient_accumulation_steps 4 "
        "--learning_rate 2e-5 --weight_decay 0.01 --warmup_ratio 0.03 --lr_scheduler_type cosine "
        "--gradient_checkpointing true --eval_steps 500 --save_steps 500 --save_total_limit 3 --logging_steps 10 "
        "--dataset_num_proc 1 --packing_num_proc 1 --dataloader_num_workers 0 --seed 42 "
        f"--output_dir {r}/runs/llm_training/ar_sft --report_to none --run_name ar_sft --model_type qwen3 "
        f"--template qwen3 --val_dataset {d}/test.jsonl --max_steps 1"]

    gpu = print_command("train.sh", env={"TEXTWM_ROOT": str(r), "NUM_GPUS": "8", "WANDB_API_KEY": "k"})
    assert gpu.returncode == 0, gpu.stderr
    n = nproc_16()
    assert gpu.stdout.splitlines() == [
        "swift sft --model Qwen/Qwen3-8B --use_hf true --check_model false --tuner_type full "
        f"--dataset {d}/train.jsonl --torch_dtype bfloat16 --attn_impl flash_attn --packing true --max_length 8192 "
        "--num_train_epochs 2 "
        "--per_device_train_batch_size 2 --per_device_eval_batch_size 2 --gradient_accumulation_steps 4 "
        "--learning_rate 2e-5 --weight_decay 0.01 --warmup_ratio 0.03 --lr_scheduler_type cosine "
        "--gradient_checkpointing true --eval_steps 500 --save_steps 500 --save_total_limit 3 --logging_steps 10 "
        f"--dataset_num_proc {n} --packing_num_proc {n} --dataloader_num_workers 4 --seed 42 "
        f"--output_dir {r}/runs/llm_training/ar_sft --report_to wandb --run_name ar_sft "
        f"--val_dataset {d}/test.jsonl --deepspeed zero2"]


def test_every_train_knob_reaches_the_line_as_bash_passed_it(root):
    d = root / "runs" / "ar_data"
    res = print_command("train.sh", env={
        "TEXTWM_ROOT": str(root), "NUM_GPUS": "4", "MODEL": "m", "MODEL_TYPE": "llama", "TEMPLATE": "chatml",
        "USE_HF": "false", "DATA_DIR": str(d), "RUN_NAME": "r", "MASTER_PORT": "29999", "TORCH_DTYPE": "bfloat16",
        "ATTN_IMPL": "eager", "PACKING": "true", "DEEPSPEED": "zero3_offload", "EPOCHS": "3",
        "PER_DEVICE_TRAIN_BATCH_SIZE": "5", "PER_DEVICE_EVAL_BATCH_SIZE": "6", "GRAD_ACCUM_STEPS": "7", "LR": "3e-6",
        "WEIGHT_DECAY": "0.1", "WARMUP_RATIO": "0.05", "LR_SCHED": "linear", "MAX_LEN": "4096",
        "GRADIENT_CHECKPOINTING": "false", "EVAL_STEPS": "11", "SAVE_STEPS": "12", "SAVE_TOTAL_LIMIT": "2",
        "LOGGING_STEPS": "3", "DATASET_NUM_PROC": "9", "DATALOADER_NUM_WORKERS": "2", "REPORT_TO": "tensorboard",
        "CHECK_MODEL": "true", "SEED": "7", "SWIFT": "/opt/swift"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"/opt/swift sft --model m --use_hf false --check_model true --tuner_type full --dataset {d}/train.jsonl "
        "--torch_dtype bfloat16 --attn_impl eager --packing true --max_length 4096 --num_train_epochs 3 "
        "--per_device_train_batch_size 5 --per_device_eval_batch_size 6 --gradient_accumulation_steps 7 "
        "--learning_rate 3e-6 --weight_decay 0.1 --warmup_ratio 0.05 --lr_scheduler_type linear "
        "--gradient_checkpointing false --eval_steps 11 --save_steps 12 --save_total_limit 2 --logging_steps 3 "
        "--dataset_num_proc 9 --packing_num_proc 9 --dataloader_num_workers 2 --seed 7 "
        f"--output_dir {root}/runs/llm_training/r --report_to tensorboard --run_name r --model_type llama "
        f"--template chatml --val_dataset {d}/test.jsonl --deepspeed zero3_offload"]


def test_train_sh_data_dir_val_file_and_their_errors(root):
    paper = root / "llm_training" / "data"        # the paper's place wins when it has a train.jsonl
    paper.mkdir(parents=True)
    (paper / "train.jsonl").write_text("{}\n")
    (paper / "test.jsonl").write_text("{}\n")
    res = print_command("train.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", "VAL_FILE": ""})
    assert res.returncode == 0, res.stderr
    argv = res.stdout.split()
    assert argv[argv.index("--dataset") + 1] == f"{paper}/train.jsonl" and "--val_dataset" not in argv

    missing = print_command("train.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", "TRAIN_FILE": "/no/t.jsonl"})
    assert missing.returncode == 2 and missing.stdout == ""
    assert (f"train.sh: TRAIN_FILE '/no/t.jsonl' not found. Write it with llm_training/prepare_data.py (--out-dir "
            f"{paper}) or point TRAIN_FILE at a JSONL") in missing.stderr
    bad_val = print_command("train.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", "VAL_FILE": "/no/v.jsonl"})
    assert bad_val.returncode == 2 and "train.sh: VAL_FILE '/no/v.jsonl' not found" in bad_val.stderr
    bad_number = print_command("train.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", "LR": "fast"})
    assert bad_number.returncode == 2 and "$LR" in bad_number.stderr and "'fast'" in bad_number.stderr


def test_eval_lines_are_the_bash_scripts_on_cpu_and_on_8_gpus(root):
    r, d = root, root / "runs" / "ar_data"
    newest = r / "runs" / "llm_training" / "ar_sft" / "v10-20250103-000000" / "checkpoint-5"   # sort -V: v10 > v9
    cpu = print_command("eval.sh", env={"TEXTWM_ROOT": str(r), "NUM_GPUS": "0", "MODEL_TYPE": "qwen3",
                                        "TEMPLATE": "qwen3", "EVAL_FILES": f"{d}/test.jsonl {d}/ood.jsonl"})
    assert cpu.returncode == 0, cpu.stderr
    n = nproc_16()
    assert cpu.stdout.splitlines() == [
        f"swift sft --model {newest} --use_hf true --check_model false --tuner_type full --dataset {d}/{name}.jsonl#1 "
        f"--val_dataset {d}/{name}.jsonl --num_train_epochs 0 --eval_on_start true --save_strategy no "
        "--torch_dtype float32 --attn_impl sdpa --packing false --max_length 8192 --per_device_eval_batch_size 2 "
        f"--dataset_num_proc {n} --packing_num_proc {n} --dataloader_num_workers 4 "
        f"--output_dir {newest}/eval_loss/{name} --add_version false --report_to none --model_type qwen3 "
        "--template qwen3" for name in ("test", "ood")]

    gpu = print_command("eval.sh", "--max_length", "100", env={
        "TEXTWM_ROOT": str(r), "NUM_GPUS": "8", "MODEL_DIR": "Qwen/Qwen3-8B", "DEEPSPEED": "zero3"})
    assert gpu.returncode == 0, gpu.stderr
    assert gpu.stdout.splitlines() == [
        f"swift sft --model Qwen/Qwen3-8B --use_hf true --check_model false --tuner_type full --dataset "
        f"{d}/test.jsonl#1 --val_dataset {d}/test.jsonl --num_train_epochs 0 --eval_on_start true --save_strategy no "
        "--torch_dtype bfloat16 --attn_impl flash_attn --packing true --max_length 8192 "
        f"--per_device_eval_batch_size 2 --dataset_num_proc {n} --packing_num_proc {n} --dataloader_num_workers 4 "
        f"--output_dir {r}/runs/llm_training/eval_loss/test --add_version false --report_to none --deepspeed zero3 "
        "--max_length 100"]


def test_eval_sh_knobs_the_papers_names_and_errors(root):
    d = root / "runs" / "ar_data"
    checkpoint = root / "ck"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    res = print_command("eval.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", "MODEL_DIR": str(checkpoint),
                                       "OUTPUT_BASE": str(root / "ev"), "EVAL_FILES": f"{d}/t*.jsonl"})
    assert res.returncode == 0, res.stderr
    lines = [line.split() for line in res.stdout.splitlines()]     # the pattern expands, sorted, as bash did
    assert [argv[argv.index("--val_dataset") + 1] for argv in lines] == [f"{d}/test.jsonl", f"{d}/train.jsonl"]
    assert [argv[argv.index("--output_dir") + 1] for argv in lines] == [f"{root}/ev/test", f"{root}/ev/train"]

    for env, message in (({"MODEL_DIR": "/no/run"}, "eval.sh: MODEL_DIR '/no/run' not found (give a checkpoint"),
                         ({"MODEL_DIR": str(root)}, f"no config.json and no last-checkpoint under MODEL_DIR '{root}'"),
                         ({"EVAL_FILES": "/no/a.jsonl"}, "eval.sh: eval file '/no/a.jsonl' not found (set VAL_FILE")):
        bad = print_command("eval.sh", env={"TEXTWM_ROOT": str(root), "NUM_GPUS": "0", **env})
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_every_knob_of_the_scripts_is_a_field_with_its_variable():
    for cls, knobs in ((ARSFTConfig, TRAIN_KNOBS), (EvalLossConfig, EVAL_KNOBS)):
        variables = {leaf.env for leaf in leaves(cls)}
        assert set(knobs) <= variables, set(knobs) - variables


def test_the_readme_tables_are_the_configs_knobs():
    """llm_training/README.md's knob tables name every variable of the configs (but the wrappers' GPUS_UNSET and
    LAUNCHER) and no other (but the scripts' PYTHON and the paper's OUTPUT_BASE)."""
    readme = (REPO / "llm_training" / "README.md").read_text()
    train_part, eval_part = readme.split("### `train.sh` knobs")[1].split("### `eval.sh` knobs")
    for cls, part in ((ARSFTConfig, train_part), (EvalLossConfig, eval_part)):
        rows = [line.split("|")[1] for line in part.splitlines() if line.startswith("| `")]
        named = set(re.findall(r"`([A-Z_]+)`", " ".join(rows)))
        assert named - {"PYTHON", "OUTPUT_BASE"} == {leaf.env for leaf in leaves(cls)} - {"GPUS_UNSET", "LAUNCHER"}


def test_the_config_runs_from_flags_and_yaml_without_the_shell(root, monkeypatch):
    for var in (*TRAIN_KNOBS, "WANDB_API_KEY", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    config_file = root / "run.yaml"
    config_file.write_text("lr: 1e-4\nepochs: 0.5\nval_file: none\n")
    config, _ = ConfigCLI(ARSFTConfig).parse(["--config", str(config_file), "--root", str(root), "--num-gpus", "1",
                                             "--swift", "swift"])
    argv = config.argv(["--max_steps", "1"])
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert (flag("--learning_rate"), flag("--num_train_epochs"), flag("--deepspeed")) == ("1e-4", "0.5", "zero2")
    assert "--val_dataset" not in argv and argv[-2:] == ["--max_steps", "1"]
    env = config.environ()
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "NPROC_PER_NODE" not in env and env["PYTHONUNBUFFERED"] == "1"
    with pytest.raises(ConfigError, match="GRAD_ACCUM_STEPS"):
        ARSFTConfig(root=str(root), grad_accum_steps=0)


def test_floats_are_written_as_people_write_them():
    assert [swift_number(v) for v in (2e-5, 1e-4, 3e-6, 0.01, 0.03, 0.5, 2.0, 0.0, 1 / 3)] == \
        ["2e-5", "1e-4", "3e-6", "0.01", "0.03", "0.5", "2", "0", "0.3333333333333333"]


def test_the_textwm_verbs_are_the_same_launchers(root, capsys, monkeypatch):
    from textwm import cli

    monkeypatch.setenv("TEXTWM_ROOT", str(root))
    monkeypatch.setenv("SWIFT", "swift")
    assert cli.main(["train", "swift", "--num-gpus", "0", "--print-command", "--", "--max_steps", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"swift sft --model Qwen/Qwen3-8B --use_hf true --check_model false "
                                              f"--tuner_type full --dataset {root}/runs/ar_data/train.jsonl")
    assert cli.main(["eval", "loss", "--num-gpus", "0", "--model-dir", "Qwen/Qwen3-8B", "--print-command"]) == 0
    assert f"--output_dir {root}/runs/llm_training/eval_loss/test " in capsys.readouterr().out
