"""The ScienceWorld env server in-process: real worker process, real JVMs, FastAPI's TestClient.

One worker with room for two sessions; four JVMs in all (about 20 s with the worker's start).
"""

import shutil
import time

import pytest

pytest.importorskip("scienceworld")
pytest.importorskip("fastapi")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs a Java runtime (java on PATH)", allow_module_level=True)

from fastapi.testclient import TestClient

from textwm.envs import get_env
from textwm.envs.client import EnvClient
from textwm.envs.pool import PoolConfig
from textwm.envs.protocol import EnvError
from textwm.envs.server import create_env_app


@pytest.fixture(scope="module")
def client():
    app = create_env_app(get_env("sciworld"), PoolConfig(workers=1, max_sessions_per_worker=2, idle_timeout_s=600))
    with TestClient(app) as c:
        yield c


@pytest.fixture(autouse=True)
def _close_sessions_after_each_test(client):
    yield
    for sid in client.app.state.pool.session_ids():  # a failed test must not fill the next one's capacity
        client.delete(f"/session/{sid}")


def error_of(r):
    return r.json()["error"]["message"]


def test_reset_step_delete_round_trip(client):
    r = client.post("/reset", json={"task_id": "boil_v0", "with_valid_actions": True})
    assert r.status_code == 200, r.text
    body = r.json()
    sid = body["session_id"]
    assert "hallway" in body["observation"] and "boil water" in body["task_description"]
    assert "look around" in body["valid_actions"] and body["info"]["simplification"] == "easy"

    r = client.post("/step", json={"session_id": sid, "action": "go to kitchen"})
    assert r.status_code == 200, r.text
    step = r.json()
    assert set(step) == {"observation", "score", "reward", "done", "info"}     # fast path: no valid actions
    assert "kitchen" in step["observation"] and step["done"] is False and step["info"]["moves"] == 1
    r = client.post("/step", json={"session_id": sid, "action": "look around", "with_valid_actions": True})
    assert "open freezer" in r.json()["valid_actions"]

    # A reset naming the session plays the new task in the same JVM.
    r = client.post("/reset", json={"task_id": "melt_v1", "session_id": sid})
    assert r.status_code == 200 and r.json()["session_id"] == sid and "melt" in r.json()["task_description"]
    assert "valid_actions" not in r.json()

    assert client.request("DELETE", "/session", json={"session_id": sid}).status_code == 200
    r = client.post("/step", json={"session_id": sid, "action": "look around"})
    assert r.status_code == 404 and "closed" in error_of(r)
    assert client.delete(f"/session/{sid}").status_code == 404
    assert client.get("/health").json()["sessions"] == 0


def test_gen_copies_are_independent_sessions_and_capacity_is_bounded(client):
    a = client.post("/reset", json={"task_id": "boil_v0_gen1"}).json()
    b = client.post("/reset", json={"task_id": "boil_v0_gen2"}).json()
    assert a["session_id"] != b["session_id"] and a["observation"] == b["observation"]
    assert client.post("/step", json={"session_id": a["session_id"], "action": "go to kitchen"}).status_code == 200
    moved = client.post("/step", json={"session_id": a["session_id"], "action": "look around"}).json()
    stayed = client.post("/step", json={"session_id": b["session_id"], "action": "look around"}).json()
    assert "called the kitchen" in moved["observation"] and "called the hallway" in stayed["observation"]
    assert (moved["info"]["moves"], stayed["info"]["moves"]) == (1, 0)      # "look around" is not a move

    r = client.post("/reset", json={"task_id": "boil_v0_gen3"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "capacity 2" in error_of(r)
    health = client.get("/health").json()
    assert (health["status"], health["sessions"], health["capacity"], health["workers_alive"]) == ("ok", 2, 2, 1)
    for body in (a, b):
        assert client.delete(f"/session/{body['session_id']}").status_code == 200


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"task_id": "boyl_v0"}, 400, "known: boil, change-the-state-of-matter-of"),
    ({"task_id": "boil_v30"}, 400, "variations 0..29; got 30"),
    ({"task_id": "boil"}, 400, "'<task>_v<variation>'"),
    ({"task_id": 7}, 422, "task_id must be a string"),
    ({"task_id": "boil_v0", "with_valid_action": True}, 422, "with_valid_action: Extra inputs"),
    ({}, 422, "task_id: Field required"),
])
def test_bad_resets(client, body, status, needle):
    r = client.post("/reset", json=body)
    assert r.status_code == status and needle in error_of(r), r.text


def test_bad_steps(client):
    r = client.post("/step", json={"session_id": "nope", "action": "look around"})
    assert r.status_code == 404 and "unknown session 'nope'" in error_of(r)
    r = client.post("/step", json={"session_id": "nope", "action": ["look", "around"]})
    assert r.status_code == 422 and "action must be a string, got list" in error_of(r)
    r = client.post("/step", content=b'{"session_id": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in error_of(r)


def test_client_episode_end_and_expiry(client):
    env = EnvClient("http://testserver", http=client)
    first = env.reset("boil_v0")
    assert first.info["session_id"] == env.session_id and first.task_description.startswith("Your task is to boil")
    end = env.step("focus on picture")                       # focusing on the wrong thing fails the task
    assert (end.done, end.score, end.reward) == (True, -100, -100)
    with pytest.raises(EnvError, match="is over") as info:
        env.step("look around")
    assert info.value.status == 409 and info.value.attempts == 1

    again = env.reset("boil_v0")                             # same session, a new episode
    assert again.info["session_id"] == first.info["session_id"] and again.observation == first.observation
    assert not env.step("look around").done

    pool = client.app.state.pool
    expired = client.portal.call(pool.expire_idle, time.monotonic() + 10_000)
    assert expired == [env.session_id]
    with pytest.raises(EnvError, match="expired after 600 s") as info:
        env.step("look around")
    assert info.value.status == 404
    env.close()                                              # closing an expired session is fine
    assert client.get("/health").json()["sessions"] == 0


def test_the_jvm_gateway_needs_its_auth_token(real_env):
    from py4j.java_gateway import GatewayParameters, JavaGateway
    from py4j.protocol import Py4JError

    port = real_env._env._gateway.gateway_parameters.port
    intruder = JavaGateway(gateway_parameters=GatewayParameters(port=port))
    with pytest.raises(Py4JError, match="Authentication"):
        intruder.jvm.java.lang.System.getProperty("java.version")
    assert real_env.reset("boil_v0").observation                     # the env itself still works
