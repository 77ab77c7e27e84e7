"""The hybrid's benchmark runs on the bundled rows and finds the AR model's greedy answers at every draft length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow           # two decoders over three rows, as a subprocess: ~15 s on 2 cores
def test_the_benchmark_reports_answers_equal_to_ar_greedy(tiny_llama_dirs, tmp_path):
    out = tmp_path / "spec.json"
    res = subprocess.run([sys.executable, "scripts/bench_speculative.py", "--verifier", str(tiny_llama_dirs["ar"]),
                          "--drafter", str(tiny_llama_dirs["wedlm"]), "--rows", "data/samples/sciworld_wm_test.jsonl",
                          "--limit", "3", "--gen-length", "12", "--draft-lengths", "1", "4", "--device", "cpu",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["draft_length"] for r in report["results"]] == [1, 4] and report["prompts"] == 3
    assert all(r["equal_to_ar_greedy"] == 1 and r["tokens_per_verifier_forward"] >= 1 for r in report["results"])
