"""The chat client against a real HTTP server on a loopback port (scripted to fail on purpose)."""

import asyncio
import json
import threading

import pytest

from tests.conftest import chat, run_script, write_lines
from tests.serving.scripted_http import ScriptedServer
from textwm.clients.openai import (
    ChatClient,
    ChatRequestError,
    RetryPolicy,
    chat_completions_url,
    complete_all,
    resolve_model_id,
)

FAST = RetryPolicy(max_retries=2, backoff_s=0.01)


def chat_server(failures, model="tiny-wm"):
    """An OpenAI-compatible endpoint echoing the last user message; ``failures[key]`` = statuses to
    return first for requests whose last message is ``key`` (-1 drops the connection)."""
    todo = {k: list(v) for k, v in failures.items()}
    lock = threading.Lock()

    def respond(method, path, body):
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": model, "object": "model"}]}, 0
        key = body["messages"][-1]["content"]
        with lock:
            status = todo[key].pop(0) if todo.get(key) else 200
        if status == -1:
            return 0, None, 0
        if status != 200:
            return status, {"error": f"scripted {status}"}, 0
        return 200, {"choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": f"echo: {key}"}}],
                     "usage": {"completion_tokens": 2}}, 0

    server = ScriptedServer(respond)
    server.posts = lambda: [b for m, _, b in server.requests if m == "POST"]
    return server


@pytest.fixture
def server():
    s = chat_server({"flaky": [503, 502], "dead": [503] * 10, "bad": [400], "drop": [-1]})
    yield s
    s.close()


def _run(coro):
    return asyncio.run(coro)


def test_url_forms():
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions"):
        assert chat_completions_url(url) == "http://h:1/v1/chat/completions"


def test_retries_transient_errors_then_succeeds(server):
    async def go():
        async with ChatClient(server.url, model="m", retry=FAST) as client:
            return await client.complete([{"role": "user", "content": "flaky"}], max_tokens=5)
    result = _run(go())
    assert result.text == "echo: flaky" and result.finish_reason == "stop"
    assert len(server.posts()) == 3 and server.posts()[0]["max_tokens"] == 5


def test_gives_up_after_bounded_retries_and_does_not_retry_4xx(server):
    async def go(key):
        async with ChatClient(server.url, model="m", retry=FAST) as client:
            return await client.complete([{"role": "user", "content": key}])
    with pytest.raises(ChatRequestError, match=r"HTTP 503.*after 3 attempts") as err:
        _run(go("dead"))
    assert err.value.status == 503 and err.value.attempts == 3
    with pytest.raises(ChatRequestError, match="HTTP 400") as err:
        _run(go("bad"))
    assert err.value.attempts == 1
    assert _run(go("drop")).text == "echo: drop"  # a dropped connection is transient


def test_connection_refused_is_an_error():
    async def go():
        async with ChatClient("http://127.0.0.1:9", model="m", retry=RetryPolicy(max_retries=1, backoff_s=0.01)) as c:
            return await c.complete([{"role": "user", "content": "x"}])
    with pytest.raises(ChatRequestError, match="ConnectError"):
        _run(go())


def test_complete_all_keeps_order_and_marks_failures(server):
    prompts = [[{"role": "user", "content": k}] for k in ("a", "dead", "b", "flaky")]

    async def go():
        async with ChatClient(server.url, model="m", retry=FAST) as client:
            return await complete_all(client, prompts, concurrency=2)
    out = _run(go())
    assert out[0] == "echo: a" and out[2] == "echo: b" and out[3] == "echo: flaky"
    assert out[1].startswith("ERROR: HTTP 503")


def test_resolve_model_id(server):
    assert _run(resolve_model_id(server.url + "/v1/chat/completions")) == "tiny-wm"


def test_llm_training_evaluate_generates_then_scores(server, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "test.jsonl", [
        chat(user="ok", answer="echo: ok"), chat(user="dead", answer="x"), chat(user="other", answer="echo: other")])
    out = tmp_path / "out"
    res = run_script("llm_training/evaluate.py", "--api-url", server.url, "--data-dir", str(data), "--datasets",
                     "test", "--output-dir", str(out), "--max-retries", "1", "--concurrency", "4", "--no-mauve")
    assert res.returncode == 0, res.stderr
    assert "3 predictions from tiny-wm" in res.stdout and "(1 failed requests)" in res.stdout
    rows = [json.loads(line) for line in (out / "test_outputs.jsonl").read_text().splitlines()]
    assert set(rows[0]) == {"index", "config", "prediction_raw", "reference", "generated", "ground_truth"}
    assert rows[1]["prediction_raw"].startswith("ERROR")
    summary = json.loads((out / "eval_summary.json").read_text())["test"]
    assert (summary["num_samples"], summary["num_dropped_errors"], summary["exact_match"]) == (2, 1, 1.0)


def test_a_server_error_is_not_retried():
    """A 500 is the server's own fault: the same request fails the same way, so it is reported at once."""
    s = chat_server({"broken": [500] * 5})

    async def go():
        async with ChatClient(s.url, model="m", retry=FAST) as client:
            return await client.complete([{"role": "user", "content": "broken"}])
    try:
        with pytest.raises(ChatRequestError, match="HTTP 500") as err:
            _run(go())
        assert err.value.status == 500 and err.value.attempts == 1 and len(s.posts()) == 1
    finally:
        s.close()
