"""A real env server on a loopback port for the length of a ``with`` block (GRPO's real-env rollouts in a run).

    with local_env_server("sciworld", port=30210, workers=4, log_dir=run / "env_server") as url:
        ...                                   # url: http://127.0.0.1:30210

The server is ``python -m textwm.envs.server`` in its own process group (its log in ``log_dir``), stopped when
the block ends, also on an error.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from textwm.serving.launch import ManagedProcess


@contextmanager
def local_env_server(env: str, *, port: int, workers: int, log_dir: Path, start_timeout_s: float = 300) -> Iterator[str]:
    """Serve ``env`` on ``127.0.0.1:port`` with ``workers`` env processes; yields its URL."""

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            raise RuntimeError(f"port {port} is in use: choose another env server port")
    server = ManagedProcess(f"{env}_env_server", Path(log_dir))
    server.start([sys.executable, "-m", "textwm.envs.server", "--env", env, "--port", str(port),
                  "--workers", str(workers)])
    try:
        server.wait_healthy(f"http://127.0.0.1:{port}/health", start_timeout_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
