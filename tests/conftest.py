"""Shared test helpers. Tests never read ../shared: fixtures are built here or by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Simulator start states built from real envs (textwm.envs.sim_cache) go to a per-run folder, not the user's cache.
os.environ.setdefault("TEXTWM_SIM_CACHE", tempfile.mkdtemp(prefix="textwm-sim-cache-"))


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


# --- tiny models, built once per test session (a second each) ---------------------------------

TINY_CORPUS = [
    "This room is called the kitchen. In it, you see: a stove, a fridge, a sink and a table.",
    "The door is now open.", "You move to the hallway.", "Nothing happens.", "You pick up the thermometer.",
    "The stove is now activated.", "The water in the pot is boiling.", "You focus on the orange.",
] * 10


@pytest.fixture(scope="session")
def tiny_sdar_dir(tmp_path_factory) -> Path:
    """A random tiny SDAR checkpoint with block_size 8 (so block lengths 1, 2, 4, 8 divide it)."""
    from textwm.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_sdar"), TINY_CORPUS, family="sdar", block_size=8,
                                 vocab_size=400, seed=1)


@pytest.fixture(scope="session")
def tiny_wedlm_dir(tmp_path_factory) -> Path:
    """A random tiny WeDLM checkpoint (Qwen3 + mask token, masking block 8)."""
    from textwm.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_wedlm"), TINY_CORPUS, family="wedlm", block_size=8,
                                 vocab_size=400, seed=2)


@pytest.fixture(scope="session")
def tiny_ar_dir(tmp_path_factory) -> Path:
    from textwm.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ar"), TINY_CORPUS, family="ar", vocab_size=400, seed=2)


#: Block size of the tiny Llama diffusion checkpoints (converted from the AR one).
LLAMA_BLOCK = 8


@pytest.fixture(scope="session")
def tiny_llama_dirs(tmp_path_factory) -> dict[str, Path]:
    """A random tiny Llama AR checkpoint (SmolLM2's architecture: no q/k norms, no biases, tied embeddings)
    and its on-disk conversions (``convert_checkpoint``) to SDAR and WeDLM, block size :data:`LLAMA_BLOCK`."""
    from textwm.models.checkpoint import convert_checkpoint
    from textwm.models.tiny import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny_llama")
    ar = build_tiny_checkpoint(root / "ar", TINY_CORPUS, family="ar", arch="llama", vocab_size=400, seed=3)
    return {"ar": ar, **{family: convert_checkpoint(ar, root / family, block_size=LLAMA_BLOCK, family=family)
                         for family in ("sdar", "wedlm")}}


ROOMS = ["kitchen", "hallway", "bedroom", "garden"]


@pytest.fixture(scope="session")
def train_file(tmp_path_factory) -> Path:
    """16 chat rows (a move between two rooms each) for training runs."""
    rows = [chat(user=f"State: You are in the {a}.\n\nAction: go to {b}", answer=f"You move to the {b}.")
            for a in ROOMS for b in ROOMS]
    return write_lines(tmp_path_factory.mktemp("data") / "train.jsonl", rows)
