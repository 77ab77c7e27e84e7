"""The WM client against a real loopback HTTP server scripted to misbehave."""

import asyncio

import pytest

from tests.serving.scripted_http import ScriptedServer
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import AsyncWMClient, WMBadResponse, WMClient, WMUnavailable, unwrap_observation

FAST = RetryPolicy(max_retries=2, backoff_s=0.01)


@pytest.mark.parametrize(("raw", "obs"), [
    ("The door is now open.", "The door is now open."),
    ("<think>hmm</think>\nThe door is now open.", "The door is now open."),
    ("<tool_response>{\"result\": [1]}</tool_response>", '{"result": [1]}'),       # real JSON payload kept
    ('{"observation": "You see a lamp."}', "You see a lamp."),
    ('{"next_observation": "{\\"observation\\": \\"nested\\"}"}', "nested"),
    ('"a JSON string"', "a JSON string"),
    ('{"observation": "a", "score": 3}', "a"),
    ('{"observation": "a", "output": "b"}', '{"observation": "a", "output": "b"}'),   # ambiguous: left as is
    ("OBSERVATION: You move to the kitchen.", "You move to the kitchen."),
    ("Observation:\nYou move to the kitchen.", "You move to the kitchen."),
    ("Obsidian is here.", "Obsidian is here."),                                      # no label without a colon
    ('[{"role": "assistant", "content": "You move to the kitchen."}]', "You move to the kitchen."),
    ('[{"role": "assistant", "content": [{"type": "text", "text": "You see a lamp."}]}]', "You see a lamp."),
    ('[{"type": "text", "text": "You see a lamp."}]', "You see a lamp."),
    ('[{"app": "spotify", "username": "a"}]', '[{"app": "spotify", "username": "a"}]'),  # a tool's array stays
    ("[]", "[]"),
])
def test_unwrap_observation(raw, obs):
    assert unwrap_observation(raw) == obs


def _proxy(script):
    """A fake WM proxy whose answer depends on the action sent."""
    def respond(method, path, body):
        return script[body["input"]["action"]]
    return ScriptedServer(respond)


@pytest.fixture
def proxy():
    attempts = {"n": 0}

    def busy_then_ok(method, path, body):
        attempts["n"] += 1
        return (503, {"error": "busy"}, 0) if attempts["n"] < 3 else (200, {"generated_text": "ok after busy"}, 0)

    script = {
        "look": (200, {"generated_text": '{"observation": "A kitchen."}', "usage": {"completion_tokens": 4}}, 0),
        "garbage": (200, b"<html>oops</html>", 0),
        "empty": (200, {"generated_text": "<think>...</think>  "}, 0),
        "error": (422, {"error": "input.state: missing"}, 0),
        "down": (502, {"error": "upstream unreachable"}, 0),
        "slow": (200, {"generated_text": "late"}, 2.0),
    }

    def respond(method, path, body):
        action = body["input"]["action"]
        return busy_then_ok(method, path, body) if action == "busy" else script[action]

    server = ScriptedServer(respond)
    yield server
    server.close()


def test_sync_client(proxy):
    with WMClient(proxy.url, retry=FAST, num_diffusion_steps=2) as wm:
        result = wm.predict("sys", {"room": "kitchen"}, "look")
        assert result.observation == "A kitchen." and result.usage == {"completion_tokens": 4}
        sent = proxy.requests[-1][2]["input"]
        assert sent["state"] == {"room": "kitchen"} and sent["num_diffusion_steps"] == 2 and sent["max_tokens"] == 256
        assert wm.predict("sys", "s", "busy").observation == "ok after busy"   # 503 twice, then success
        with pytest.raises(WMBadResponse, match="non-JSON"):
            wm.predict("sys", "s", "garbage")
        with pytest.raises(WMBadResponse, match="empty observation"):
            wm.predict("sys", "s", "empty")
        with pytest.raises(WMBadResponse, match="422"):
            wm.predict("sys", "s", "error")
        with pytest.raises(WMUnavailable, match="502"):
            wm.predict("sys", "s", "down")
    with WMClient(proxy.url, retry=RetryPolicy(max_retries=0), timeout_s=0.5) as wm, \
            pytest.raises(WMUnavailable, match="Timeout"):
        wm.predict("sys", "s", "slow")
    with WMClient("http://127.0.0.1:9", retry=FAST) as wm, pytest.raises(WMUnavailable, match="ConnectError"):
        wm.predict("sys", "s", "look")


def test_async_client(proxy):
    async def go():
        async with AsyncWMClient(proxy.url, retry=FAST) as wm:
            results = await asyncio.gather(*(wm.predict("sys", "s", "look") for _ in range(5)))
            assert {r.observation for r in results} == {"A kitchen."}
            with pytest.raises(WMBadResponse):
                await wm.predict("sys", "s", "empty")
    asyncio.run(go())


def test_max_concurrent_caps_the_requests_in_flight():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    lock, in_flight, peak = threading.Lock(), [0], [0]

    def respond(method, path, body):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.1)
        with lock:
            in_flight[0] -= 1
        return 200, {"generated_text": "ok", "usage": {}}, 0

    server = ScriptedServer(respond)
    try:
        for cap, expected in ((2, 2), (None, 6)):
            peak[0] = 0
            with WMClient(server.url + "/", max_concurrent=cap) as wm, ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda i: wm.predict("s", "state", f"a{i}").observation, range(6)))
            assert answers == ["ok"] * 6 and peak[0] == expected
    finally:
        server.close()
    with pytest.raises(ValueError, match="max_concurrent must be 1 or more"):
        WMClient("http://127.0.0.1:9/", max_concurrent=0)
