"""The env server as a real process on a free port: parallel sessions, a killed worker, real expiry (slow)."""

import os
import shutil
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from textwm.envs.client import EnvClient
from textwm.envs.protocol import EnvError
from textwm.serving.launch import ManagedProcess

pytestmark = pytest.mark.slow
pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs a Java runtime (java on PATH)", allow_module_level=True)

ACTIONS = ["look around", "go to kitchen", "look around", "open cupboard", "go to hallway", "inventory"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run_dir, name, *flags):
    port = free_port()
    proc = ManagedProcess(name, run_dir)
    proc.start([sys.executable, str(REPO / "sciworld" / "sciworld_env_server.py"), "--port", str(port), *flags])
    proc.wait_healthy(f"http://127.0.0.1:{port}/health", 180)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def server_proc(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("envsrv"), "sciworld_env", "--workers", "2",
                             "--max-sessions-per-worker", "5")
    yield proc, url
    proc.stop()


@pytest.fixture(scope="module")
def server(server_proc):
    return server_proc[1]


def worker_pids(server_pid: int) -> list[int]:
    """The server's worker processes in start order (= worker index); the HTTP /health shows no pids."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{entry}/cmdline").read_text()
        except OSError:
            continue
        if int(stat[1]) == server_pid and "multiprocessing" in cmdline and "resource_tracker" not in cmdline:
            children.append((int(stat[19]), int(entry)))
    return [pid for _, pid in sorted(children)]


def play(url: str, task_id: str) -> list[str]:
    with EnvClient(url, timeout_s=120) as env:
        env.reset(task_id)
        return [env.step(a).observation for a in ACTIONS]


def test_eight_parallel_sessions(server):
    tasks = [f"boil_v0_gen{i}" for i in range(4)] + ["melt_v0", "freeze_v1", "find-animal_v0", "grow-plant_v0"]
    with ThreadPoolExecutor(8) as ex:
        runs = list(ex.map(lambda t: play(server, t), tasks))
    assert len(runs) == 8 and all(len(r) == len(ACTIONS) for r in runs)
    assert runs[0] == runs[1] == runs[2] == runs[3]            # _gen copies: same task, same observations
    assert httpx.get(server + "/health").json()["sessions"] == 0


def test_killed_worker_is_reported_and_replaced(server_proc):
    proc, server = server_proc
    a, b = EnvClient(server), EnvClient(server)
    a.reset("boil_v0")
    b.reset("melt_v0")
    pids = worker_pids(proc.pid())
    assert len(pids) == 2 and all("pid" not in w for w in httpx.get(server + "/health").json()["workers"])
    a_worker = a.reset("boil_v0").info["worker"]
    b_worker = b.reset("melt_v0").info["worker"]
    assert a_worker != b_worker                              # least-loaded routing spreads the two sessions
    os.kill(pids[a_worker], signal.SIGKILL)

    started = time.monotonic()
    with pytest.raises(EnvError, match=r"was lost: worker \d \(pid \d+\) died \(killed by SIGKILL\)") as info:
        a.step("look around")
    assert info.value.status == 502 and info.value.kind == "session_lost" and time.monotonic() - started < 10
    with pytest.raises(EnvError, match="killed by SIGKILL"):      # asked again: the same clear answer
        a.step("look around")
    assert "kitchen" in b.step("go to kitchen").observation  # the other worker's session is untouched

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = httpx.get(server + "/health").json()
        if health["worker_restarts"] == 1 and health["status"] == "ok":
            break
        time.sleep(0.5)
    assert health["status"] == "ok" and health["workers_alive"] == 2, health
    assert pids[a_worker] not in worker_pids(proc.pid())
    assert "hallway" in a.reset("boil_v0").observation      # a new session (the old one is gone)
    a.close()
    b.close()


def test_idle_sessions_expire_for_real(tmp_path):
    proc, url = start_server(tmp_path, "sciworld_idle", "--workers", "1", "--idle-timeout", "1")
    try:
        env = EnvClient(url)
        env.reset("boil_v0")
        assert httpx.get(url + "/health").json()["sessions"] == 1
        time.sleep(2.5)
        assert httpx.get(url + "/health").json()["sessions"] == 0   # closed, JVM freed
        with pytest.raises(EnvError, match="expired after 1 s") as info:
            env.step("look around")
        assert info.value.status == 404
        env.close()
    finally:
        proc.stop()
