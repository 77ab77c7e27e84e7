"""llm_training/train.sh and eval.sh (shims of textwm.training.swift_sft and swift_eval) run real `swift sft` (CPU,
tiny random Qwen3) end to end.

The fast tests check the launchers' own input errors; the slow one trains one full-parameter step,
then evaluates the checkpoint loss-only and checks it reproduces the loss logged during training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_lines
from textwm.data.jsonl import read_jsonl

SAMPLE = REPO / "data" / "samples" / "sciworld_wm_train.jsonl"
N_TRAIN, N_VAL = 8, 4


def run_launcher(script: str, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``bash llm_training/<script> ARGS`` with the test venv's Python and swift, CPU only, nothing reported."""
    full_env = {**os.environ, "PYTHON": sys.executable, "SWIFT": str(Path(sys.executable).parent / "swift"),
                "NUM_GPUS": "0",
                "REPORT_TO": "none", "DATASET_NUM_PROC": "1", "DATALOADER_NUM_WORKERS": "0", **env}
    return subprocess.run(["bash", str(REPO / "llm_training" / script), *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


def safetensors_of(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_train_sh_names_a_missing_train_file(tmp_path):
    res = run_launcher("train.sh", env={"TRAIN_FILE": str(tmp_path / "nope.jsonl")})
    assert res.returncode == 2
    assert "TRAIN_FILE" in res.stderr and "nope.jsonl" in res.stderr and "prepare_data.py" in res.stderr


def test_eval_sh_names_a_missing_checkpoint(tmp_path):
    res = run_launcher("eval.sh", env={"MODEL_DIR": str(tmp_path / "no_run")})
    assert res.returncode == 2
    assert "MODEL_DIR" in res.stderr and "no_run" in res.stderr


def test_eval_sh_finds_the_papers_output_path_under_runs():
    """The paper's `MODEL_DIR=./output/<run> bash eval.sh` (run from llm_training/) finds our train.sh's
    runs/llm_training/<run>, with a notice (here an empty run folder: then the missing checkpoint is named)."""
    import shutil
    import uuid

    name = f"paper_path_{uuid.uuid4().hex[:8]}"
    run_dir = REPO / "runs" / "llm_training" / name
    run_dir.mkdir(parents=True)
    try:
        full_env = {**os.environ, "PYTHON": sys.executable, "NUM_GPUS": "0", "MODEL_DIR": f"./output/{name}"}
        res = subprocess.run(["bash", "eval.sh"], capture_output=True, text=True, cwd=REPO / "llm_training",
                             env=full_env, timeout=60)
    finally:
        shutil.rmtree(run_dir)
    assert res.returncode == 2
    assert f"using train.sh's {run_dir}" in res.stderr and "no config.json and no last-checkpoint" in res.stderr


@pytest.mark.slow
def test_train_one_step_then_eval_loss(tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts

    rows = [{"messages": r["messages"]} for r in read_jsonl(SAMPLE).rows[:N_TRAIN + N_VAL]]
    train = write_lines(tmp_path / "train.jsonl", rows[:N_TRAIN])
    val = write_lines(tmp_path / "val.jsonl", rows[N_TRAIN:])
    base = build_tiny_checkpoint(tmp_path / "base", list(chat_texts(rows)), family="ar", size="tiny")
    model_env = {"MODEL_TYPE": "qwen3", "TEMPLATE": "qwen3", "MAX_LEN": "1024"}

    res = run_launcher("train.sh", "--max_steps", "1", env={
        **model_env, "MODEL": str(base), "TRAIN_FILE": str(train), "VAL_FILE": str(val),
        "OUTPUT_DIR": str(tmp_path / "run"), "LR": "1e-3", "WARMUP_RATIO": "0", "EVAL_STEPS": "1",
        "SAVE_STEPS": "1", "LOGGING_STEPS": "1"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "no GPU" in res.stderr  # the CPU fallback is announced
    (version,) = (tmp_path / "run").glob("v*-*")
    checkpoint = version / "checkpoint-1"
    assert (checkpoint / "config.json").is_file()
    after, before = safetensors_of(checkpoint), safetensors_of(base)
    assert any(not (after[k] == before[k]).all() for k in before), "one full-parameter step changed nothing"
    train_log = [json.loads(line) for line in (version / "logging.jsonl").read_text().splitlines()]
    train_eval_loss = next(r["eval_loss"] for r in train_log if "eval_loss" in r)

    res = run_launcher("eval.sh", env={**model_env, "MODEL_DIR": str(tmp_path / "run"), "VAL_FILE": str(val),
                                       "OUTPUT_DIR": str(tmp_path / "eval")})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{checkpoint.resolve()} on {val}" in res.stdout  # the run dir resolved to its last checkpoint
    assert "eval_loss=" in res.stdout
    header, row = (tmp_path / "eval" / "eval_loss.tsv").read_text().splitlines()
    assert header.split("\t") == ["file", "eval_loss", "eval_token_acc"]
    name, loss, _acc = row.split("\t")
    assert name == str(val)
    assert float(loss) == pytest.approx(train_eval_loss, rel=1e-5)
    assert not list((tmp_path / "eval").rglob("checkpoint-*")), "a loss-only eval must save nothing"
