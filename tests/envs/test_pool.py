"""The generic worker pool behind the env server and parallel evaluation, on the toy env (real worker processes).

Capacity, idle expiry, a worker killed mid-session (its session is lost with a message naming the
crash, the worker is replaced) and the blocking pool evaluation uses: what every env gets for free.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from fastapi.testclient import TestClient

from tests.envs.toy.spec import ToySpec
from textwm.envs import get_env
from textwm.envs.blocking import BlockingPool
from textwm.envs.pool import PoolConfig
from textwm.envs.protocol import NoCapacity, SessionLost
from textwm.envs.server import create_env_app


@pytest.fixture(scope="module")
def client():
    app = create_env_app(get_env("toy"), PoolConfig(workers=1, max_sessions_per_worker=2, idle_timeout_s=600))
    with TestClient(app) as c:
        yield c


def error_of(r):
    return r.json()["error"]["message"]


def test_capacity_is_bounded_and_sessions_are_independent(client):
    a = client.post("/reset", json={"task_id": "toy_v0"}).json()
    b = client.post("/reset", json={"task_id": "toy_v0"}).json()
    assert a["session_id"] != b["session_id"] and a["observation"] == b["observation"]
    client.post("/step", json={"session_id": a["session_id"], "action": "go to kitchen"})
    looked = [client.post("/step", json={"session_id": s["session_id"], "action": "look"}).json()["observation"]
              for s in (a, b)]
    assert looked[0].startswith("You are in the kitchen") and looked[1].startswith("You are in the hall")
    full = client.post("/reset", json={"task_id": "toy_v1"})
    assert full.status_code == 503 and full.headers["retry-after"] == "1" and "capacity 2" in error_of(full)
    again = client.post("/reset", json={"task_id": "toy_v1", "session_id": a["session_id"]})   # reuse: no capacity
    assert again.status_code == 200 and again.json()["session_id"] == a["session_id"]
    for s in (a, b):
        assert client.delete(f"/session/{s['session_id']}").status_code == 200


def test_idle_sessions_expire(client):
    sid = client.post("/reset", json={"task_id": "toy_v2"}).json()["session_id"]
    pool = client.app.state.pool
    assert client.portal.call(pool.expire_idle, time.monotonic() + 10_000) == [sid]
    r = client.post("/step", json={"session_id": sid, "action": "look"})
    assert r.status_code == 404 and "expired after 600 s" in error_of(r)


def test_a_killed_worker_loses_its_sessions_and_is_replaced(client):
    sid = client.post("/reset", json={"task_id": "toy_v3"}).json()["session_id"]
    pid = client.app.state.pool.health()["workers"][0]["pid"]    # (the HTTP /health shows no pids)
    os.kill(pid, signal.SIGKILL)
    r = client.post("/step", json={"session_id": sid, "action": "look"})
    assert r.status_code == 502 and r.json()["error"]["type"] == "session_lost" and "killed by SIGKILL" in error_of(r)
    r = client.post("/step", json={"session_id": sid, "action": "look"})     # asked again: still lost, not unknown
    assert r.status_code == 502
    deadline = time.monotonic() + 60
    while client.get("/health").json()["workers_alive"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    health = client.get("/health").json()
    assert health["worker_restarts"] == 1 and client.app.state.pool.health()["workers"][0]["pid"] != pid
    assert client.post("/reset", json={"task_id": "toy_v3"}).status_code == 200
    assert 'event="sessions_lost"} 1' in client.get("/metrics").text


def test_blocking_pool_reuses_a_session_per_slot_and_survives_a_crash():
    with BlockingPool(get_env("toy"), 2) as pool:
        first = pool.reset({0: ("toy_v0", {}), 1: ("toy_v1", {})})
        assert {r["session_id"] for r in first.values()} == set(pool._sessions.values()) and len(pool._sessions) == 2
        again = pool.reset({0: ("toy_v4", {})})
        assert again[0]["session_id"] == first[0]["session_id"]               # the slot's session, reset
        os.kill(pool.health()["workers"][again[0]["info"]["worker"]]["pid"], signal.SIGKILL)
        lost = pool.step({0: "look"})[0]
        assert isinstance(lost, SessionLost)
        replaced = pool.reset({0: ("toy_v0", {})})[0]                          # waits for the replacement
        assert replaced["session_id"] != first[0]["session_id"] and pool.restarts == 1
        assert pool.step({0: "look", 1: "look"})[1]["observation"].startswith("You are in the hall")
    assert NoCapacity.status == 503


def test_a_bad_action_never_costs_the_session(client):
    sid = client.post("/reset", json={"task_id": "toy_v1"}).json()["session_id"]
    r = client.post("/step", content=b'{"session_id": "%s", "action": "look\\ud800"}' % sid.encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"]
    r = client.post("/step", content=b"look", headers={"content-type": "text/plain"})
    assert r.status_code == 415                                   # a browser's form post cannot start sessions
    assert client.post("/step", json={"session_id": sid, "action": "x" * 100}).json()["observation"]
    assert client.post("/step", json={"session_id": sid, "action": "look"}).status_code == 200   # still alive
    assert all("pid" not in w for w in client.get("/health").json()["workers"])
    client.delete(f"/session/{sid}")


def test_an_api_key_guards_every_route_but_health():
    from textwm.web import ServerSecurity

    app = create_env_app(get_env("toy"), PoolConfig(workers=1, max_sessions_per_worker=1),
                         security=ServerSecurity(api_key="k"))
    with TestClient(app) as c:
        assert c.post("/reset", json={"task_id": "toy_v0"}).status_code == 401
        assert c.get("/health").status_code == 200
        from textwm.envs.client import EnvClient

        env = EnvClient("http://testserver", http=c, api_key="k")
        assert env.reset("toy_v0").observation.startswith("You are in the hall")
        env.close()


class _ToyThatCannotStart(ToySpec):
    """The toy env whose workers fail to prepare (as ScienceWorld's do without Java)."""

    def prepare_worker(self):
        raise OSError("no JVM here")


def test_a_failed_start_names_the_workers_failure():
    # The pool stops itself when a worker fails to start; the blocking pool's clean-up then stops it again. That
    # second stop once raised "cannot schedule new futures after shutdown", which buried the real error.
    with pytest.raises(RuntimeError, match="workers failed to start: .*OSError: no JVM here"):
        BlockingPool(_ToyThatCannotStart(), 1).start()
