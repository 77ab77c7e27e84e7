"""The native server app in-process (real engine thread, real tiny model, ASGI transport)."""

import asyncio

import httpx
import pytest
from fastapi.testclient import TestClient

from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.serving.app import create_app
from textwm.serving.engine import Engine, EngineConfig

MSG = [{"role": "system", "content": "You are a world model."},
       {"role": "user", "content": "State: You are in the kitchen.\n\nAction: open door"}]


@pytest.fixture(scope="module")
def loaded(tiny_sdar_dir):
    return load_model(tiny_sdar_dir, device="cpu", dtype="float32")


def _engine(loaded, **kw):
    config = EngineConfig(served_model_name="tiny-wm", defaults=DecodeSettings(gen_length=16, temperature=0),
                          max_model_len=512, **kw)
    return Engine(loaded, config)


@pytest.fixture(scope="module")
def client(loaded):
    engine = _engine(loaded)
    with TestClient(create_app(engine)) as c:
        c.engine = engine
        yield c


def test_chat_completion(client):
    r = client.post("/v1/chat/completions", json={"model": "tiny-wm", "messages": MSG, "max_tokens": 8,
                                                   "temperature": 0, "n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny-wm"
    assert len(body["choices"]) == 2 and body["choices"][0]["message"]["content"] == body["choices"][1]["message"]["content"]
    assert body["usage"]["completion_tokens"] > 0 and body["usage"]["decoder_forwards"] > 0
    card = client.get("/v1/models").json()["data"][0]
    assert (card["id"], card["owned_by"], card["family"]) == ("tiny-wm", "textwm", "sdar")
    assert client.get("/health").json()["status"] == "ok"


def test_per_request_diffusion_settings_change_the_forward_count(client):
    def forwards(steps):
        r = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 12, "temperature": 0,
                                                       "num_diffusion_steps": steps})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["decoder_forwards"]
    assert forwards(1) < forwards(2) < forwards(4)


def test_stop_strings_cut_the_text(client):
    full = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 16, "temperature": 0}).json()
    text = full["choices"][0]["message"]["content"]
    stop = text[len(text) // 2:][:2]
    if not stop.strip():
        pytest.skip("the tiny model's output has no usable stop substring")
    cut = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 16, "temperature": 0,
                                                     "stop": [stop]}).json()
    assert cut["choices"][0]["message"]["content"] == text[: text.find(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("body", "status", "needle"), [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b'{"max_tokens": 5}', 422, "messages: Field required"),
    (b'{"messages": [{"role": "wizard", "content": "x"}]}', 422, "role must be one of"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}', 400, "exceeds the server's max_model_len"),
    (b'{"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}', 404, "'gpt-4' is not served here"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}', 422,
     "stream_options is only valid with stream=true"),
    (b'{"messages": [{"role": "user", "content": "x"}], "block_length": 3}', 400, "does not divide"),
    (b'{"messages": [{"role": "user", "content": "x"}], "remasking_strategy": "magic"}', 400, "unknown remasking"),
])
def test_bad_requests_are_4xx_with_a_message(client, body, status, needle):
    r = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert needle in r.json()["error"]["message"]


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({}, 422, "prompt: Field required"),
    ({"prompt": []}, 422, "prompt is an empty list"),
    ({"prompt": [1, -2]}, 422, "token ids must be >= 0"),
    ({"prompt": ["a", 3]}, 422, "prompt"),
    ({"prompt": ["a"] * 65}, 422, "at most 64 prompts"),
    ({"prompt": ""}, 400, "prompt 0 is empty"),
    ({"prompt": [[5], [10**6]]}, 400, "prompt 1 holds token id 1000000"),
    ({"prompt": ["a", "b", "c"], "n": 16}, 400, "48 rows, more than the server's max_batch_size"),
    ({"prompt": "x", "logprobs": 2}, 422, "logprobs are not supported"),
    ({"prompt": "x", "best_of": 3}, 422, "best_of is not supported"),
    ({"prompt": "x", "messages": MSG}, 422, "messages: Extra inputs are not permitted"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "'gpt-4' is not served here"),
])
def test_bad_completions_are_4xx_with_a_message(client, body, status, needle):
    r = client.post("/v1/completions", json=body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


def test_metrics_count_requests_and_errors(client):
    client.post("/v1/chat/completions", content=b"{", headers={"content-type": "application/json"})
    text = client.get("/metrics").text
    assert 'textwm_requests_total{model="tiny-wm"}' in text
    assert 'textwm_request_errors_total{model="tiny-wm",status="400"}' in text
    assert "textwm_tokens_per_second" in text and "textwm_queue_depth" in text
    assert 'textwm_compiles{model="tiny-wm"}' in text and 'textwm_engine_process{model="tiny-wm"} 0' in text


def test_metrics_give_the_cpu_seconds_of_the_loop_the_worker_and_the_process(client):
    def cpu(text: str, name: str) -> float:
        line = next(x for x in text.splitlines() if x.startswith(f"textwm_{name}_cpu_seconds_total{{"))
        return float(line.rsplit(" ", 1)[1])

    before = client.get("/metrics").text
    r = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4})
    assert r.status_code == 200, r.text
    after = client.get("/metrics").text
    assert cpu(after, "decode_worker") > cpu(before, "decode_worker") >= 0   # the worker decoded the request
    assert cpu(after, "event_loop") >= cpu(before, "event_loop") > 0
    assert cpu(after, "process") >= cpu(after, "event_loop") + cpu(after, "decode_worker") - 0.01


def _fail_once(obj, name):
    """Make ``obj.name`` raise on its first call (a device fault), then behave."""
    real = getattr(obj, name)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA error: device-side assert (simulated)")
        return real(*args, **kwargs)

    setattr(obj, name, flaky)


@pytest.mark.parametrize("scheduler", ["continuous", "batch"])
def test_a_decoder_failure_fails_the_request_not_the_server(loaded, scheduler):
    engine = _engine(loaded, scheduler=scheduler)
    if scheduler == "batch":
        _fail_once(engine.decoder, "generate")
    with TestClient(create_app(engine)) as c:
        if scheduler == "continuous":
            _fail_once(engine.scheduler.engine, "step")   # the scheduler rebuilds its engine after a failure
        r = c.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4})
        assert r.status_code == 500 and "device-side assert" in r.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4}).status_code == 200
        assert 'textwm_failed_requests_total{model="tiny-wm"} 1' in c.get("/metrics").text


def test_queue_full_returns_503(loaded):
    engine = _engine(loaded, max_queue=1, max_batch_size=1)

    async def burst():
        engine.start()
        try:
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://wm") as c:
                return await asyncio.gather(*(c.post("/v1/chat/completions", json={
                    "messages": MSG, "max_tokens": 400, "temperature": 0}) for _ in range(8)))
        finally:
            engine.stop()

    codes = [r.status_code for r in asyncio.run(burst())]
    assert codes.count(503) >= 4 and codes.count(200) >= 1, codes


def test_batching_serves_concurrent_requests_together(loaded):
    engine = _engine(loaded, max_batch_size=8, batch_wait_ms=50)

    async def burst():
        engine.start()
        try:
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://wm") as c:
                return await asyncio.gather(*(c.post("/v1/chat/completions", json={
                    "messages": MSG, "max_tokens": 4 + i, "temperature": 0}) for i in range(8)))
        finally:
            engine.stop()

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses)
    assert engine.metrics.steps < 8  # requests with different max_tokens still share batches


def test_a_wedlm_checkpoint_is_served_with_its_streaming_decoder(tiny_wedlm_dir):
    engine = _engine(load_model(tiny_wedlm_dir, device="cpu", dtype="float32"))
    with TestClient(create_app(engine)) as c:
        r = c.post("/v1/chat/completions", json={"model": "tiny-wm", "messages": MSG, "max_tokens": 6, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] > 0
        assert c.get("/v1/models").json()["data"][0]["family"] == "wedlm"
        # Per-request WeDLM settings: a threshold above any entropy fills the whole window at once.
        forwards = {}
        for threshold in (0.0, 1000.0):
            body = {"model": "tiny-wm", "messages": MSG, "max_tokens": 8, "temperature": 0, "window_size": 8,
                    "entropy_threshold": threshold, "stop": None}
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            forwards[threshold] = r.json()["usage"]["decoder_forwards"]
        assert forwards[1000.0] < forwards[0.0]


def test_the_worker_runs_with_a_short_switch_interval_and_restores_the_interpreters(loaded):
    import sys

    from textwm.serving.workers import WORKER_SWITCH_INTERVAL_S

    before = sys.getswitchinterval()
    engine = _engine(loaded)
    with TestClient(create_app(engine)) as c:
        assert sys.getswitchinterval() == pytest.approx(min(WORKER_SWITCH_INTERVAL_S, before))
        assert c.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4}).status_code == 200
    assert sys.getswitchinterval() == before


def test_the_switch_interval_is_restored_when_the_last_of_several_workers_stops():
    import sys

    from textwm.serving.workers import WORKER_SWITCH_INTERVAL_S, _SwitchInterval

    before, switch = sys.getswitchinterval(), _SwitchInterval()
    try:
        switch.acquire()
        switch.acquire()                    # a second engine in the same process
        switch.release()
        assert sys.getswitchinterval() == pytest.approx(min(WORKER_SWITCH_INTERVAL_S, before))
        switch.release()
        assert sys.getswitchinterval() == before
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_prompts_that_start_the_same_way_reuse_the_prefix(loaded, prefix_cache):
    """The second request of a long shared prompt finds its prefix blocks cached (counted in /metrics), and decodes
    the same answer; with --no-prefix-cache every prompt token is computed."""
    long_state = " ".join(f"a mug {i} is on the counter." for i in range(8))
    messages = [MSG[0], {"role": "user", "content": f"State: {long_state}\n\nAction: look"}]
    engine = _engine(loaded, prefix_cache=prefix_cache)
    with TestClient(create_app(engine)) as c:
        answers = [c.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 6, "temperature": 0})
                   .json()["choices"][0]["message"]["content"] for _ in range(2)]
        text = c.get("/metrics").text
    assert answers[0] == answers[1]

    def counter(name):
        return int(next(line for line in text.splitlines() if line.startswith(f"textwm_{name}{{")).split()[-1])

    prompt, hits, computed = (counter(n) for n in ("prompt_tokens_total", "prefix_cache_hit_tokens_total",
                                                   "prompt_tokens_computed_total"))
    assert prompt > 2 * 64 and hits + computed == prompt
    assert (hits >= 64) if prefix_cache else (hits == 0)
    # one prefill forward a request, at the prompt's own shape on the CPU (no bucketed prefills by default there)
    assert counter("prefill_forwards_total") == counter("prefill_forwards_unbucketed_total") == 2
