"""The paper's evaluation command lines (eval_fast.py, eval_openai.py, eval_parallel.py's and eval_sciworld.py's
positional forms) map onto our flags; each entry point answers --help and refuses a bad flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from textwm.eval import parallel
from textwm.eval.paper_forms import (
    OPENAI_URL,
    agent_flags,
    device_of,
    episodes_dir,
    eval_fast_argvs,
    eval_openai_argv,
    sciworld_argv,
)

ROOT = Path(__file__).resolve().parents[2]


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_device_episodes_dir_and_agent_flags():
    assert device_of("3") == "cuda:3" and device_of("cpu") == "cpu" and device_of("cuda:1") == "cuda:1"
    assert episodes_dir(Path("/tmp/x/out.jsonl")) == Path("/tmp/x/out_eval")
    assert agent_flags("expert") == ["--agent", "expert"]
    assert agent_flags("http://h:1/v1", agent_model="m") == ["--agent-url", "http://h:1/v1", "--agent-model", "m"]
    assert agent_flags("ckpt", device="cuda:0", batch_size=4) == ["--agent-path", "ckpt", "--agent-batch-size", "4",
                                                                  "--device", "cuda:0"]


def test_eval_fast_is_one_eval_parallel_positional_form_per_checkpoint(tmp_path):
    runs = eval_fast_argvs(["runs/a/checkpoint-10", "runs/b/checkpoint-20/", "--dataset", "rows.jsonl", "--gpus", "2",
                            "--out-dir", str(tmp_path)])
    assert runs[0] == ["runs/a/checkpoint-10", "rows.jsonl", str(tmp_path / "eval_checkpoint-10.jsonl"), "2",
                       "--max-turns", "35", "--parallel", "32"]
    assert runs[1][2] == str(tmp_path / "eval_checkpoint-20.jsonl")
    argv, out_file = parallel.eval_argv(parallel._parser("p").parse_args(runs[0]), "alfworld")
    assert out_file == tmp_path / "eval_checkpoint-10.jsonl"
    assert _value(argv, "--device") == "cuda:2" and _value(argv, "--agent-path") == "runs/a/checkpoint-10"
    assert _value(argv, "--output-dir") == str(tmp_path / "eval_checkpoint-10_eval")


def test_eval_fast_refuses_what_it_cannot_reproduce():
    with pytest.raises(ValueError, match="--gpus '0,3'"):
        eval_fast_argvs(["ckpt", "--dataset", "r.jsonl", "--gpus", "0,3"])
    with pytest.raises(ValueError, match="share a basename"):
        eval_fast_argvs(["a/ckpt", "b/ckpt", "--dataset", "r.jsonl"])
    with pytest.raises(SystemExit):
        eval_fast_argvs(["ckpt", "--dataset", "r.jsonl", "--tp", "2"])


def test_eval_openai_is_an_endpoint_agent_with_an_episodes_file(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "oai.jsonl"
    flags = eval_openai_argv(["gpt-x", "rows.jsonl", str(out), "--max-turns", "50", "--concurrency", "16",
                              "--limit", "5"])
    argv, out_file = parallel.eval_argv(parallel._parser("p").parse_args(flags), "alfworld")
    assert out_file == out and _value(argv, "--output-dir") == str(tmp_path / "oai_eval")
    assert _value(argv, "--agent-url") == OPENAI_URL and _value(argv, "--agent-model") == "gpt-x"
    assert _value(argv, "--workers") == "16" and _value(argv, "--max-turns") == "50"
    assert _value(argv, "--episodes") == "5"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert _value(eval_openai_argv(["m", "r", "o"]), "--agent") == "http://127.0.0.1:9/v1"


def test_sciworld_positional_form_maps_to_agent_real():
    argv = sciworld_argv(["ckpt", "rows.jsonl", "lfm_sft", "1", "--max-turns", "20"])
    assert argv == ["agent-real", "--agent-path", "ckpt", "--rows", "rows.jsonl", "--device", "cuda:1",
                    "--output-dir", str(Path("data") / "eval_lfm_sft"), "--max-turns", "20"]
    ours = ["agent-real", "--rows", "r.jsonl", "--agent-url", "http://h/v1", "--output-dir", "d"]
    assert sciworld_argv(ours) == ours and sciworld_argv(["--rows", "r", "all"]) == ["--rows", "r", "all"]
    with pytest.raises(ValueError, match="CKPT ROWS LABEL GPU"):
        sciworld_argv(["ckpt", "rows.jsonl", "label"])


def _script(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / path), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", ["alfworld/eval_fast.py", "alfworld/eval_openai.py", "sciworld/eval_sciworld.py"])
def test_entry_points_answer_help(path):
    done = _script(path, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_entry_points_refuse_bad_flags():
    assert "unrecognized arguments: --bogus" in _script("alfworld/eval_fast.py", "c", "--dataset", "r",
                                                        "--bogus").stderr
    assert _script("alfworld/eval_openai.py", "m", "r", "o", "--bogus").returncode == 2
    bad = _script("sciworld/eval_sciworld.py", "ckpt", "rows.jsonl")
    assert bad.returncode == 2 and "CKPT ROWS LABEL GPU" in bad.stderr
