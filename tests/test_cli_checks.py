"""Every command line refuses bad output paths and numbers before any work, and SIGTERM leaves no temp file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, chat, run_script, write_lines


@pytest.fixture
def blocked(tmp_path):
    """A path that cannot be a folder: its parent is a file."""
    (tmp_path / "a_file").write_text("x")
    return tmp_path / "a_file" / "out"


def test_output_paths_fail_before_the_work(tmp_path, blocked, tiny_sdar_dir):
    data = write_lines(tmp_path / "eval_test.jsonl", [chat() for _ in range(3)])
    runs = [
        run_script("sdar/eval_generate.py", "--model-path", str(tiny_sdar_dir), "--data-dir", str(tmp_path),
                   "--datasets", "test", "--output-dir", str(blocked), "--num-gpus", "0"),
        run_script("sdar/train.py", f"model_name_or_path={tiny_sdar_dir}", f"train_file={data}",
                   f"output_dir={blocked}", "objective=sdar", "block_length=8", "max_steps=1"),
        run_script("sdar/prepare_data.py", "--input", str(data), "--output", str(blocked / "x.jsonl")),
        run_script("sdar/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "test", "--output-dir",
                   str(blocked)),
    ]
    for res in runs:
        assert res.returncode == 2, res.stderr[-2000:]
        assert "a_file is a file" in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize(("override", "needle"), [
    ("learning_rate=-1", "learning_rate must be > 0"),
    ("num_train_epochs=-1", "would train nothing"),
    ("max_steps=0", "max_steps must be -1"),
    ("learning_rate=[", "learning_rate must be a number"),
])
def test_train_refuses_configs_that_train_nothing(tmp_path, override, needle):
    res = run_script("sdar/train.py", "model_name_or_path=m", "train_file=t.jsonl", override)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize(("flag", "needle"), [("--per-batch", "--per-batch must be >= 1"),
                                              ("--prompt-truncate", "--prompt-truncate must be >= 1")])
def test_eval_generate_numbers(tmp_path, flag, needle):
    for value in ("0", "-5"):
        res = run_script("sdar/eval_generate.py", "--model-path", "m", "--data-dir", str(tmp_path), "--datasets",
                         "x", "--output-dir", str(tmp_path / "o"), flag, value)
        assert res.returncode == 2 and needle in res.stderr, res.stderr[-2000:]


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    script = ("import sys, time\n"
              "from textwm.config import exit_on_sigterm\n"
              "from textwm.data.jsonl import atomic_write\n"
              "exit_on_sigterm()\n"
              "with atomic_write(sys.argv[1]) as f:\n"
              "    f.write('x' * 1000000)\n"
              "    print('writing', flush=True)\n"
              "    time.sleep(30)\n")
    out = tmp_path / "big.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGTERM)
    started = time.monotonic()
    assert proc.wait(10) == 128 + signal.SIGTERM and time.monotonic() - started < 5
    assert list(tmp_path.iterdir()) == []                          # neither the output nor a hidden .tmp


@pytest.mark.parametrize("argv", [["-m", "textwm.serving", "server", "--model-path", "m"],
                                  ["-m", "textwm.serving", "proxy"], ["sciworld/sciworld_env_server.py"]])
def test_servers_refuse_a_public_address_without_a_key(argv):
    res = subprocess.run([sys.executable, *argv, "--host", "0.0.0.0"], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert res.returncode == 2 and "without an API key" in res.stderr and "--allow-unauthenticated" in res.stderr
