"""scripts/bench_train.py (CPU smoke) and scripts/compare_loss_curves.py."""

import json

from tests.conftest import run_script


def test_bench_train_runs_every_arm_on_the_cpu_with_the_same_first_loss(tmp_path):
    out = tmp_path / "bench.json"
    result = run_script("scripts/bench_train.py", "--device", "cpu", "--sizes", "tiny", "--objectives", "sdar",
                        "--cutoff", "256", "--rows", "2", "--steps", "1", "--warmup", "1", "--vocab", "1024",
                        "--variants", "plain", "chunked", "ckpt", "chunked+ops+every2", "offload", "--out", str(out))
    assert result.returncode == 0, result.stderr
    arms = json.loads(out.read_text())["arms"]
    assert [a["variant"] for a in arms] == ["plain", "chunked", "ckpt", "chunked+ops+every2", "offload"]
    assert all("error" not in a and a["tokens_per_s"] > 0 and a["estimate_gib"] > 0 for a in arms)
    assert len({a["first_loss"] for a in arms}) == 1, arms       # no switch changes the loss
    assert out.with_suffix(".txt").read_text().count("tiny        sdar") == 5


def test_bench_train_refuses_an_unknown_switch():
    result = run_script("scripts/bench_train.py", "--device", "cpu", "--variants", "chunked+turbo")
    assert result.returncode != 0 and "unknown atom 'turbo' in 'chunked+turbo'" in result.stderr


def _log(path, losses):
    path.write_text("".join(f"2026-12-03 INFO textwm.training.trainer: step {10 * (i + 1)}/{10 * len(losses)} | "
                            f"loss {x:.4f} | lr 0.0002 | 100 tok/s | epoch 1.00\n" for i, x in enumerate(losses)))
    return path


def test_compare_loss_curves_passes_close_curves_and_fails_far_or_missing_ones(tmp_path):
    a = _log(tmp_path / "a.log", [9.0, 6.0, 4.0])
    close = _log(tmp_path / "b.log", [9.0, 6.05, 4.02])
    far = _log(tmp_path / "c.log", [9.0, 6.0, 4.5])
    short = _log(tmp_path / "d.log", [9.0, 6.0])
    ok = run_script("scripts/compare_loss_curves.py", str(a), str(close), "--tolerance", "0.01")
    assert ok.returncode == 0 and "largest relative difference 0.83%" in ok.stdout
    assert run_script("scripts/compare_loss_curves.py", str(a), str(far)).returncode == 1
    missing = run_script("scripts/compare_loss_curves.py", str(a), str(short))
    assert missing.returncode == 1 and "steps logged by one run only: [30]" in missing.stderr
    nan = tmp_path / "n.log"
    nan.write_text(_log(tmp_path / "x.log", [9.0, 6.0]).read_text() + "step 30/30 | loss nan | lr 0\n")
    assert run_script("scripts/compare_loss_curves.py", str(a), str(nan)).returncode == 1   # a run gone nan fails
    empty = tmp_path / "e.log"
    empty.write_text("nothing here\n")
    bad = run_script("scripts/compare_loss_curves.py", str(a), str(empty))
    assert bad.returncode != 0 and "e.log: no 'step N/M | loss X' lines" in bad.stderr
