"""What the GRPO tests of every env share: run scripts on CPU, a tiny agent, a tiny WM stack on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.conftest import REPO


def run_script(folder: str, script: str, *args: str, env: dict[str, str], timeout: float = 300
               ) -> subprocess.CompletedProcess:
    """``bash <folder>/<script> ARGS`` on CPU with the test venv's swift, nothing reported."""
    full_env = {**os.environ, "SWIFT": str(Path(sys.executable).parent / "swift"), "NUM_GPUS": "0",
                "REPORT_TO": "none", "DATASET_NUM_PROC": "1", "DATALOADER_NUM_WORKERS": "0", **env}
    return subprocess.run(["bash", str(REPO / folder / script), *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_agent(rows: Sequence[dict], out: Path) -> Path:
    """A tiny random Qwen3-shaped agent whose tokenizer is trained on ``rows``' texts."""
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts

    return build_tiny_checkpoint(out, list(chat_texts(rows)), family="ar", size="tiny", vocab_size=1024, seed=3)


@contextlib.contextmanager
def wm_stack(wm_rows: Sequence[dict], work: Path) -> Iterator[str]:
    """A tiny SDAR world model on the native server, behind the WM proxy; yields the proxy URL."""
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts
    from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

    wm = build_tiny_checkpoint(work / "wm", list(chat_texts(wm_rows)), family="sdar", size="tiny", block_size=4,
                               vocab_size=1024, seed=4)
    server_port, proxy_port = free_port(), free_port()
    server, proxy = ManagedProcess("server", work), ManagedProcess("proxy", work)
    spec = BackendSpec(backend="native", model_path=str(wm), port=server_port, served_model_name="tiny-wm",
                       device="cpu", max_model_len=4096)
    try:
        server.start([*server_command(spec), "--temperature", "0", "--max-tokens", "16"])
        server.wait_healthy(f"http://127.0.0.1:{server_port}/health", 120)
        proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"), "--max-retries", "1",
                     "--timeout", "60"])
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        yield f"http://127.0.0.1:{proxy_port}/"
    finally:
        proxy.stop()
        server.stop()


#: Knobs of a two-step CPU GRPO run of a tiny agent (2 generations x 3 turns).
TINY_GRPO = {"MODEL_TYPE": "qwen3", "TEMPLATE": "qwen3", "WM_MAX_TOKENS": "16", "WM_MAX_RETRIES": "1",
             "NUM_GENERATIONS": "2", "PER_DEVICE_TRAIN_BATCH_SIZE": "2", "GRAD_ACCUM_STEPS": "1", "MAX_TURNS": "3",
             "MAX_COMPLETION_LENGTH": "16", "MAX_LENGTH": "4096", "SAVE_STEPS": "100",
             # One generation round a step, so the tests know how many episodes a step plays.
             "DYNAMIC_SAMPLE": "false",
             # The tiny random world models, sampled, can answer an empty observation: a WM failure by design, which
             # these tests of the plumbing must not meet at random. The sampled path: tests/rl/test_swift_adapters.py.
             "WM_TEMPERATURE": "0"}
