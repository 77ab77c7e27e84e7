"""The served stack of the demo and the comparison: up behind the proxy, and stopped on a SIGTERM too."""

import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.eval.helpers import free_port

SNIPPET = """
import sys, time
from pathlib import Path
from textwm.generation.settings import DecodeSettings
from textwm.serving.local_stack import local_wm_stack
model, log_dir, wm_port, proxy_port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with local_wm_stack(model, log_dir=log_dir, wm_port=wm_port, proxy_port=proxy_port, device="cpu",
                    decode=DecodeSettings(gen_length=4, temperature=0.0)) as endpoint:
    print("up", endpoint, flush=True)
    time.sleep(600)
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_a_sigterm_stops_the_servers_it_started(tiny_sdar_dir, tmp_path):
    wm_port, proxy_port = free_port(), free_port()
    child = subprocess.Popen([sys.executable, "-c", SNIPPET, str(tiny_sdar_dir), str(tmp_path), str(wm_port),
                              str(proxy_port)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = child.stdout.readline()
        assert line.startswith(f"up http://127.0.0.1:{proxy_port}/"), line
        assert _listening(wm_port) and _listening(proxy_port)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 20
        while (_listening(wm_port) or _listening(proxy_port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(wm_port) and not _listening(proxy_port)
        # The server's counters were kept before it stopped.
        assert "textwm_decode_steps_total" in (tmp_path / "wm_server_metrics.prom").read_text()
    finally:
        child.kill()


def test_a_taken_port_is_named(tmp_path):
    from textwm.generation.settings import DecodeSettings
    from textwm.serving.local_stack import local_wm_stack

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} is in use"), local_wm_stack(
                "m", log_dir=tmp_path, wm_port=port, proxy_port=free_port(), device="cpu",
                decode=DecodeSettings(gen_length=4)):
            pass
