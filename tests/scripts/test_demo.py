import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end(repo, tmp_path):
    res = subprocess.run(["bash", str(repo / "scripts" / "demo.sh"), "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "scores" / "eval_summary.json").read_text())
    assert set(summary) == {"copy_state", "action_lookup"}
    assert summary["action_lookup"]["exact_match"] > summary["copy_state"]["exact_match"]
    assert (tmp_path / "scores" / "eval_summary.png").stat().st_size > 10_000
