"""A world model served on this machine for a while: the native server and the proxy in front of it, started,
checked healthy and always stopped (the demo's and the comparison's GRPO and agent-in-WM stages).

    with local_wm_stack(model, log_dir=out / "stack", wm_port=30101, proxy_port=30100, device="cpu",
                        decode=DecodeSettings(gen_length=48, temperature=0.0)) as endpoint:
        ...   # endpoint: "http://127.0.0.1:30100/", what the env plugins and the evaluator call

When the block ends, the server's counters (``/metrics``: requests, decode steps, rows per step, seconds in the
decoder) are kept beside its log as ``wm_server_metrics.prom``, so a run's record says how its world model was kept
busy.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from textwm.generation.settings import DecodeSettings
from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

log = logging.getLogger(__name__)
METRICS_FILE = "wm_server_metrics.prom"


def save_metrics(url: str, path: Path) -> None:
    """The server's ``/metrics`` text to ``path``; a server that does not answer is logged, not raised (the block's
    own outcome matters more)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            path.write_bytes(resp.read())
    except OSError as exc:
        log.warning("could not keep the WM server's counters from %s: %s", url, exc)


def check_ports_free(*ports: int) -> None:
    """Refuse ports that something already listens on (a stack left running, another run), by number."""
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise RuntimeError(f"port {port} is in use; pass --wm-port/--proxy-port")


@contextmanager
def local_wm_stack(model_path: str | Path, *, log_dir: Path, wm_port: int, proxy_port: int, device: str,
                   decode: DecodeSettings, served_model_name: str = "wm", max_model_len: int = 4096,
                   server_timeout_s: float = 180, proxy_timeout_s: float = 120) -> Iterator[str]:
    """Serve ``model_path`` (native backend) behind the proxy; yields the proxy's endpoint. Both processes are
    stopped when the block ends, also on an error (their logs stay in ``log_dir``)."""

    check_ports_free(wm_port, proxy_port)
    server, proxy = ManagedProcess("wm_server", log_dir), ManagedProcess("wm_proxy", log_dir)
    # A SIGTERM (a job's time limit, `timeout`, kill) would end Python without `finally`, leaving both servers
    # running with their ports taken: turn it into SystemExit while the stack is up.
    spec = BackendSpec(backend="native", model_path=str(model_path), port=wm_port, served_model_name=served_model_name,
                       device=device, max_model_len=max_model_len, decode=decode)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        if on_main_thread:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        server.start(server_command(spec))
        server.wait_healthy(f"http://127.0.0.1:{wm_port}/health", server_timeout_s)
        proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{wm_port}"), "--timeout", str(int(proxy_timeout_s))])
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        yield f"http://127.0.0.1:{proxy_port}/"
    finally:
        if on_main_thread:        # a second SIGTERM must not cut the stopping short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if server.pid() is not None:
            save_metrics(f"http://127.0.0.1:{wm_port}/metrics", Path(log_dir) / METRICS_FILE)
        try:
            proxy.stop()
        finally:
            server.stop()
            if on_main_thread:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
