"""The WM server, the proxy and the clients against careless and hostile input (issue 10's catalogue)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.serving.scripted_http import ScriptedServer
from textwm.clients.openai import ChatClient, ChatRequestError
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient, WMUnavailable
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.serving.app import create_app
from textwm.serving.engine import Engine, EngineConfig
from textwm.serving.proxy import ProxyConfig, create_proxy_app

MSG = [{"role": "user", "content": "State: You are in the kitchen.\n\nAction: open door"}]
SLOW_TEMPLATE = "{% for i in range(30000) %}{% for j in range(30000) %}{% endfor %}{% endfor %}{{ messages[0].content }}"


@pytest.fixture(scope="module")
def engine(tiny_sdar_dir):
    loaded = load_model(tiny_sdar_dir, device="cpu", dtype="float32")
    return Engine(loaded, EngineConfig(served_model_name="tiny-wm", max_model_len=512, allow_client_chat_template=True,
                                       defaults=DecodeSettings(gen_length=16, temperature=0, block_length=8)))


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine), raise_server_exceptions=False) as c:
        yield c


def chat(client, **body):
    return client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4, **body})


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"denoise_steps": 2}, 422, "denoise_steps: Extra inputs are not permitted"),
    ({"seed": 2**70}, 422, "seed"),
    ({"chat_template_kwargs": {"tokenize": True}}, 400, "chat_template_kwargs.tokenize"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, 400, "add_generation_prompt"),
    ({"chat_template_kwargs": {"conversation": []}}, 400, "conversation"),
    ({"chat_template_kwargs": {"enable_thinking": {"nested": 1}}}, 400, "must be a string, number or boolean"),
    ({"chat_template_kwargs": {"chat_template": "{% for %}"}}, 400, "template failed"),
    ({"messages": [{"role": "user", "content": "x" * 9000}]}, 400, "cannot fit"),
    # Settings that pass a type check and would overflow the shared sampling step: refused alone.
    ({"temperature": 1e-39}, 400, "temperature must be 0 (greedy) or at least 1e-05"),
    ({"repetition_penalty": 1e-300}, 400, "repetition_penalty must be in [0.01, 100]"),
    ({"num_diffusion_steps": 30_000_000}, 400, "num_diffusion_steps must be at most block_length (8)"),
    ({"stop": ["a"] * 33}, 400, "more than the server's --max-stop-strings 32"),
    ({"stop": ["x" * 3000, "y" * 3000]}, 400, "more than the server's --max-stop-chars 4096"),
    ({"messages": MSG * 1025}, 400, "more than the server's --max-messages 1024"),
    # Strict types and no field dropped.
    ({"max_tokens": "8"}, 422, "max_tokens: Input should be a valid integer"),
    ({"stream": "yes"}, 422, "stream: Input should be a valid boolean"),
    ({"messages": [{**MSG[0], "name": "bob"}]}, 422, "name: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 422,
     "only text parts"),
])
def test_bad_requests_are_4xx_naming_the_field(client, body, status, needle):
    r = chat(client, **body)
    assert r.status_code == status and needle in r.json()["error"]["message"], r.text
    assert r.json()["error"]["request_id"]


def test_max_tokens_is_an_exact_cap_and_denoising_steps_is_honoured(client):
    for max_tokens in (1, 3, 6, 9):                               # block 8: the decoder fills whole blocks
        r = chat(client, max_tokens=max_tokens, denoising_steps=2)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= max_tokens
    assert chat(client, denoising_steps=2, num_diffusion_steps=3).status_code == 422


def test_health_answers_while_a_request_is_prepared_and_templates_are_time_limited(client):
    answers: list = []
    slow = threading.Thread(target=lambda: answers.append(chat(client, chat_template_kwargs={
        "chat_template": SLOW_TEMPLATE})))
    slow.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert client.get("/health").status_code == 200
    assert time.monotonic() - started < 0.2                       # the event loop is free
    slow.join(30)
    (r,) = answers
    assert r.status_code == 400 and "longer than 2 s" in r.json()["error"]["message"]
    ok = chat(client, chat_template_kwargs={"chat_template": "{{ messages[0].content }}"})
    assert ok.status_code == 200                                  # a fresh sandbox after the kill


def test_client_templates_are_refused_by_default(engine, tiny_sdar_dir):
    strict = Engine(engine.loaded, EngineConfig(served_model_name="tiny-wm", max_model_len=512))
    with TestClient(create_app(strict)) as c:
        r = chat(c, chat_template_kwargs={"chat_template": "{{ 1 }}"})
    assert r.status_code == 400 and "--allow-client-chat-template" in r.json()["error"]["message"]


def test_the_metrics_count_every_error(client):
    before = client.get("/metrics").text
    chat(client, seed=-1)
    client.post("/v1/chat/completions", content=b"[" * 100_000, headers={"content-type": "application/json"})
    text = client.get("/metrics").text
    assert 'status="422"' in text and 'status="400"' in text and text != before


def test_proxy_unknown_fields_and_one_deadline_for_a_hung_upstream():
    def hang(method, path, body):
        if path.endswith("/models"):
            return 200, {"data": [{"id": "m", "owned_by": "textwm"}]}, 0
        return 200, {"choices": []}, 5.0                         # answers after the proxy gave up
    upstream = ScriptedServer(hang)
    try:
        proxy = TestClient(create_proxy_app(ProxyConfig(upstream=upstream.url, timeout_s=1.0)))
        r = proxy.post("/", json={"input": {"state": "s", "action": "a", "block_length": 4}})
        assert r.status_code == 422 and "block_length" in r.json()["error"]["message"]
        r = proxy.post("/", json={"input": {"state": "s", "action": "a"}, "model": "x"})
        assert r.status_code == 422 and "model" in r.json()["error"]["message"]
        started = time.monotonic()
        r = proxy.post("/", json={"input": {"state": "s", "action": "a", "top_p": 0.9}})
        assert r.status_code == 504 and time.monotonic() - started < 2.0   # --timeout 1 bounds the whole request
        posts = [b for m, p, b in upstream.requests if m == "POST"]
        assert len(posts) == 1 and posts[0]["top_p"] == 0.9               # a read timeout is not retried
    finally:
        upstream.close()


@pytest.mark.parametrize(("answer", "status", "needle"), [
    ({"choices": [{"message": {"content": None}, "finish_reason": "stop"}]}, 502, "empty completion"),   # lmdeploy
    ({"choices": []}, 502, "malformed response"),
    ({"choices": [{"message": {"content": 7}}]}, 502, "not text"),
])
def test_proxy_answers_a_bad_upstream_completion_with_a_502(answer, status, needle):
    def respond(method, path, body):
        if path.endswith("/models"):
            return 200, {"data": [{"id": "m", "owned_by": "lmdeploy"}]}, 0
        return 200, answer, 0
    upstream = ScriptedServer(respond)
    try:
        proxy = TestClient(create_proxy_app(ProxyConfig(upstream=upstream.url, timeout_s=5.0)))
        r = proxy.post("/", json={"input": {"state": "s", "action": "a"}})
        assert r.status_code == status and needle in r.json()["error"]["message"], r.text
    finally:
        upstream.close()


def test_clients_keep_one_deadline_across_retries():
    calls = []

    def busy(method, path, body):
        calls.append(time.monotonic())
        return 503, {"error": "busy"}, 0.3
    server = ScriptedServer(busy)
    try:
        started = time.monotonic()
        with WMClient(server.url + "/", timeout_s=1.0, retry=RetryPolicy(max_retries=10, backoff_s=0.2)) as wm, \
                pytest.raises(WMUnavailable):
            wm.predict("sys", "s", "a")
        assert time.monotonic() - started < 1.5 and 1 < len(calls) < 6
        import asyncio

        async def one() -> None:
            async with ChatClient(server.url, timeout_s=1.0, retry=RetryPolicy(max_retries=10, backoff_s=0.2)) as c:
                await c.complete(MSG)
        started = time.monotonic()
        with pytest.raises(ChatRequestError):
            asyncio.run(one())
        assert time.monotonic() - started < 1.5
    finally:
        server.close()
    assert httpx.codes.SERVICE_UNAVAILABLE == 503


@pytest.mark.parametrize("family", ["ar", "sdar", "wedlm"])
@pytest.mark.parametrize("scheduler", ["continuous", "batch"])
def test_a_poison_request_fails_alone_beside_healthy_ones(family, scheduler, request):
    """Requests whose settings would make the shared sampling step non-finite are refused before they join a batch:
    the healthy requests sent with them are all answered, on every family and both schedulers."""
    import asyncio

    loaded = load_model(request.getfixturevalue(f"tiny_{family}_dir"), device="cpu", dtype="float32")
    engine = Engine(loaded, EngineConfig(served_model_name="tiny-wm", max_model_len=512, scheduler=scheduler,
                                         defaults=DecodeSettings(gen_length=8, temperature=0.7, block_length=4)))
    poisons = [{"temperature": 1e-39}, {"repetition_penalty": 1e-300}, {"temperature": 1e-30, "top_p": 0.5}]

    async def run():
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            bodies = [{"temperature": 0.7, "seed": i} for i in range(6)] + poisons
            return await asyncio.gather(*(c.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 8,
                                                                               **b}) for b in bodies))

    engine.start()
    try:
        answers = asyncio.run(run())
    finally:
        engine.stop()
    assert [r.status_code for r in answers] == [200] * 6 + [400] * 3
    assert engine.metrics.worker_errors == 0


def test_proxy_bounds_the_model_lookup_names_refused_credentials_and_answers_health_itself():
    def hang_everything(method, path, body):
        return 200, {"data": [{"id": "m"}]}, 5.0                      # accepts, answers too late
    def refuse(method, path, body):
        return 401, {"error": "bad key"}, 0
    for respond, status, needle in ((hang_everything, 504, "did not answer"),
                                    (refuse, 502, "refused the proxy's credentials (HTTP 401)")):
        upstream = ScriptedServer(respond)
        try:
            with TestClient(create_proxy_app(ProxyConfig(upstream=upstream.url, timeout_s=1.0))) as proxy:
                asked = len(upstream.requests)
                started = time.monotonic()
                health = proxy.get("/health")
                assert health.status_code == 200 and time.monotonic() - started < 0.5
                assert len(upstream.requests) == asked                # /health does not call the upstream
                started = time.monotonic()
                r = proxy.post("/", json={"input": {"state": "s", "action": "a"}})
                assert r.status_code == status and needle in r.json()["error"]["message"], r.text
                assert time.monotonic() - started < 2.5               # --timeout 1, not a fixed wait
                assert proxy.get("/health/upstream").status_code == 503
                bad = proxy.post("/", content=b'{"input": {"state": "s", "action": "a", "temperature": Infinity}}',
                                 headers={"content-type": "application/json"})
                assert bad.status_code == 400 and "Infinity is not a JSON number" in bad.json()["error"]["message"]
        finally:
            upstream.close()


def test_openai_content_parts_of_text_are_one_message(client):
    parts = [{"type": "text", "text": "State: You are in the kitchen.\n\n"}, {"type": "text", "text": "Action: open door"}]
    as_parts = chat(client, messages=[{"role": "user", "content": parts}], temperature=0).json()
    as_text = chat(client, temperature=0).json()
    assert as_parts["choices"][0]["message"] == as_text["choices"][0]["message"]
    assert as_parts["usage"]["prompt_tokens"] == as_text["usage"]["prompt_tokens"]


def test_a_client_that_leaves_cancels_its_upstream_call():
    """The proxy waits on the upstream and on the client: a disconnect cancels the upstream call (closing its
    connection, so the upstream server drops its rows), and nothing is answered."""
    import asyncio

    from starlette.requests import Request

    from textwm.serving.proxy import _unless_client_leaves

    cancelled = []

    async def upstream_call():
        try:
            await asyncio.sleep(5)
            return {"generated_text": "late"}
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def run(leave_after: float | None):
        async def receive():
            if leave_after is None:
                await asyncio.sleep(60)
            await asyncio.sleep(leave_after)
            return {"type": "http.disconnect"}
        request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
        started = time.monotonic()
        answer = await _unless_client_leaves(request, upstream_call() if leave_after else asyncio.sleep(0, "ok"))
        return answer, time.monotonic() - started

    answer, seconds = asyncio.run(run(0.2))
    assert answer is None and seconds < 1.0 and cancelled == [True]
    assert asyncio.run(run(None))[0] == "ok"
