"""The tiny CPU examples in the entry scripts' docstrings run as written (on the bundled samples)."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Entry scripts whose docstring gives a self-contained example on the repository's bundled data.
SCRIPTS = ["sdar/evaluate.py", "wedlm/evaluate.py", "llm_training/evaluate.py"]


def first_example(script: str) -> list[str]:
    """The first ``python <script> ...`` command of the script's docstring (continuation lines joined)."""
    doc = ast.get_docstring(ast.parse((ROOT / script).read_text())) or ""
    text = re.sub(r"\\\\\n\s*", " ", doc)
    line = next(x.strip() for x in text.splitlines() if x.strip().startswith(f"python {script}"))
    return shlex.split(line)


def test_the_three_scorers_give_one_example():
    """The three evaluate.py wrap one scorer: their examples are the same command (so one run checks all three)."""
    sdar = first_example(SCRIPTS[0])
    for script in SCRIPTS[1:]:
        argv = first_example(script)
        assert argv[1] == script and argv[2:] == sdar[2:]


@pytest.mark.slow           # the scorer's MAUVE featuriser: ~35 s on 2 cores
def test_the_docstring_example_runs(tmp_path):
    argv = first_example(SCRIPTS[0])
    argv = [sys.executable, *argv[1:]]
    argv[argv.index("--output-dir") + 1] = str(tmp_path)        # not the example's /tmp folder
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "eval_summary.json").is_file()
