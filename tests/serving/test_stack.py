"""The real WM stack: native server and proxy as processes on free loopback ports (slow tier)."""

import asyncio
import socket
import time

import httpx
import pytest

from textwm.clients.wm import AsyncWMClient, WMClient, WMUnavailable
from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

pytestmark = pytest.mark.slow
PAYLOAD = {"input": {"system_prompt": "You are a world model.", "state": "You are in the kitchen.",
                     "action": "open door", "max_tokens": 12}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run_dir, model, port, name, *extra, **kw):
    proc = ManagedProcess(f"server_{name}", run_dir)
    spec = BackendSpec(backend="native", model_path=str(model), port=port, served_model_name=name, device="cpu",
                       max_model_len=1024, **kw)
    proc.start([*server_command(spec), "--temperature", "0", "--max-tokens", "16", *extra])
    proc.wait_healthy(f"http://127.0.0.1:{port}/health", 120)
    return proc


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_sdar_dir):
    run_dir = tmp_path_factory.mktemp("stack")
    server_port, proxy_port = free_port(), free_port()
    server = start_server(run_dir, tiny_sdar_dir, server_port, "wm-a")
    proxy = ManagedProcess("proxy", run_dir)
    proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"), "--max-retries", "1", "--timeout", "10"])
    proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
    state = {"run_dir": run_dir, "server": server, "proxy": proxy, "server_port": server_port,
             "proxy_url": f"http://127.0.0.1:{proxy_port}", "model": tiny_sdar_dir}
    yield state
    state["proxy"].stop()
    state["server"].stop()  # a test may have replaced it (restart with another model)


def test_completion_through_the_proxy(stack):
    health = httpx.get(stack["proxy_url"] + "/health").json()
    assert (health["status"], health["model"], health["kind"]) == ("ok", "wm-a", "native")   # auto-resolved
    r = httpx.post(stack["proxy_url"] + "/", json=PAYLOAD, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["generated_text"] and r.json()["usage"]["completion_tokens"] > 0
    bare = httpx.post(stack["proxy_url"] + "/", json={**PAYLOAD["input"], "state": {"room": "kitchen", "items": [1]}},
                      timeout=60)
    assert bare.status_code == 200  # no "input" wrapper; a non-string state is json.dumps'ed


def test_diffusion_steps_reach_the_native_server(stack):
    def forwards(steps):
        body = {"input": {**PAYLOAD["input"], "num_diffusion_steps": steps}}
        return httpx.post(stack["proxy_url"] + "/", json=body, timeout=60).json()["usage"]["decoder_forwards"]
    assert forwards(1) < forwards(4)


@pytest.mark.parametrize(("body", "status"), [(b"{oops", 400), (b'{"input": {"state": "s"}}', 422),
                                              (b'{"input": {"state": "s", "action": "a", "max_tokens": 0}}', 422)])
def test_proxy_rejects_bad_payloads(stack, body, status):
    r = httpx.post(stack["proxy_url"] + "/", content=body, timeout=30, headers={"content-type": "application/json"})
    assert r.status_code == status and r.json()["error"]


def test_oversized_max_tokens_is_passed_back_as_4xx(stack):
    r = httpx.post(stack["proxy_url"] + "/", json={"input": {**PAYLOAD["input"], "max_tokens": 5000}}, timeout=30)
    assert r.status_code == 400 and "max_model_len" in r.json()["error"]["message"]


def test_wm_clients(stack):
    with WMClient(stack["proxy_url"] + "/", max_tokens=8) as wm:
        assert wm.predict("sys", "You are in the hallway.", "look around").raw

    async def many():
        async with AsyncWMClient(stack["proxy_url"] + "/", max_tokens=8) as wm:
            return await asyncio.gather(*(wm.predict("sys", f"state {i}", "wait") for i in range(6)))
    assert len(asyncio.run(many())) == 6


def test_upstream_down_then_back_with_another_model(stack):
    stack["server"].stop()
    started = time.monotonic()
    r = httpx.post(stack["proxy_url"] + "/", json=PAYLOAD, timeout=30)
    assert r.status_code == 502 and "upstream" in r.json()["error"]["message"]
    assert time.monotonic() - started < 10
    assert httpx.get(stack["proxy_url"] + "/health/upstream").status_code == 503          # a probe upstream
    health = httpx.get(stack["proxy_url"] + "/health").json()       # the proxy's own state: up, the upstream's last
    assert health["status"] == "ok" and health["upstream_last_status"] is None
    with WMClient(stack["proxy_url"] + "/") as wm, pytest.raises(WMUnavailable):
        wm.predict("sys", "s", "a")
    stack["server"] = start_server(stack["run_dir"], stack["model"], stack["server_port"], "wm-b")
    r = httpx.post(stack["proxy_url"] + "/", json=PAYLOAD, timeout=60)
    assert r.status_code == 200, r.text                       # recovered, re-resolved to the new model id
    assert httpx.get(stack["proxy_url"] + "/health").json()["model"] == "wm-b"


def test_real_server_queue_full_is_503(tmp_path, tiny_sdar_dir):
    port = free_port()
    server = start_server(tmp_path, tiny_sdar_dir, port, "busy", "--max-queue", "1", max_batch_size=1)

    async def burst():
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*(c.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "State: s\n\nAction: a"}], "max_tokens": 500})
                for _ in range(8)))
    try:
        codes = [r.status_code for r in asyncio.run(burst())]
    finally:
        server.stop()
    assert codes.count(503) >= 4 and 200 in codes, codes
