"""Shared test helpers. Tests never read ../shared: fixtures are built here or by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def write_lines(path: Path, lines: list) -> Path:
    """Write JSONL: dict/list items are dumped, str items written verbatim, bytes raw."""
    with open(path, "wb") as f:
        for item in lines:
            if isinstance(item, bytes):
                f.write(item)
            elif isinstance(item, str):
                f.write(item.encode())
            else:
                f.write(json.dumps(item).encode())
            f.write(b"\n")
    return path


def chat(user: str = "State: s\n\nAction: look", answer: str = "You see a room.", system: str = "sys") -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                         {"role": "assistant", "content": answer}]}


def run_script(script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a folder entry point (e.g. ``sdar/evaluate.py``) as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


@pytest.fixture
def repo() -> Path:
    return REPO
