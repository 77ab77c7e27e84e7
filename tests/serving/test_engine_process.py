"""The decode worker as an engine process: a real spawned child on a tiny model, served through the real app."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model, load_tokenizer
from textwm.serving.app import create_app
from textwm.serving.engine import Engine, EngineConfig, ModelSource
from textwm.serving.engine_process import EngineProcessFailed

MSG = [{"role": "system", "content": "You are a world model."},
       {"role": "user", "content": "State: You are in the kitchen.\n\nAction: open door"}]


def _config(**kw) -> EngineConfig:
    return EngineConfig(served_model_name="tiny-wm", defaults=DecodeSettings(gen_length=16, temperature=0),
                        max_model_len=512, **kw)


def _process_engine(path, **kw) -> Engine:
    config = _config(engine_process=True, **kw)
    return Engine(load_tokenizer(path), config, source=ModelSource(str(path), device="cpu", dtype="float32"))


def _metric(text: str, name: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(f"textwm_{name}{{"))
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def served(tiny_ar_dir):
    """The same checkpoint served by a worker thread and by an engine process."""
    thread = Engine(load_model(tiny_ar_dir, device="cpu", dtype="float32"), _config())
    process = _process_engine(tiny_ar_dir)
    with TestClient(create_app(thread)) as t, TestClient(create_app(process)) as p:
        yield t, p, process


def test_an_engine_process_answers_as_the_worker_thread(served):
    thread, process, _ = served
    body = {"messages": MSG, "max_tokens": 12, "temperature": 0, "n": 2}
    a = thread.post("/v1/chat/completions", json=body)
    b = process.post("/v1/chat/completions", json=body)
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert [c["message"]["content"] for c in b.json()["choices"]] == [c["message"]["content"]
                                                                      for c in a.json()["choices"]]
    assert b.json()["usage"] == a.json()["usage"]

    stream = process.post("/v1/chat/completions", json={**body, "n": 1, "stream": True})
    chunks = [json.loads(x[6:]) for x in stream.text.split("\n\n") if x.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == \
        a.json()["choices"][0]["message"]["content"]


def test_an_engine_process_reports_its_start_on_the_servers_metrics_when_it_is_ready(tiny_ar_dir):
    # Once start() returns (the server's /health says ready), the child's counters so far (the warm-up's graphs,
    # compiles and seconds; the CPU it took to load) are the server's: a client's first reading of /metrics is
    # its baseline, not the child's empty counters waiting for a first message.
    engine = _process_engine(tiny_ar_dir)
    engine.start()
    try:
        assert engine.metrics.worker_cpu_seconds > 0
        assert engine.metrics.worker_queue_depth == 0 and engine.metrics.steps == 0
    finally:
        engine.stop()


def test_an_engine_process_reports_its_counters_on_the_servers_metrics(served):
    _, process, engine = served
    before = process.get("/metrics").text
    assert process.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 8}).status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:   # the counters come with the child's next message
        after = process.get("/metrics").text
        if _metric(after, "decode_steps_total") > _metric(before, "decode_steps_total"):
            break
        time.sleep(0.05)
    assert _metric(after, "engine_process") == 1
    assert _metric(after, "decode_steps_total") > _metric(before, "decode_steps_total")
    assert _metric(after, "prompt_tokens_total") > _metric(before, "prompt_tokens_total")
    assert _metric(after, "decode_worker_cpu_seconds_total") > 0
    assert "in an engine process" in engine.scheduler_name


def test_a_client_that_leaves_frees_its_rows_in_the_engine_process(served):
    _, process, _ = served
    with process.stream("POST", "/v1/chat/completions",
                        json={"messages": MSG, "max_tokens": 400, "stream": True, "temperature": 0}) as r:
        assert r.status_code == 200
        next(r.iter_lines())   # the stream started; leave
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _metric(process.get("/metrics").text, "rows_running"):
        time.sleep(0.05)
    assert _metric(process.get("/metrics").text, "rows_running") == 0


@pytest.mark.slow
@pytest.mark.parametrize(("signal_", "said"), [("kill", "engine process exited"),
                                                ("terminate", "engine process stopped by itself")])
def test_a_dead_engine_process_fails_its_requests_and_the_health_check(tiny_ar_dir, signal_, said):
    engine = _process_engine(tiny_ar_dir)
    with TestClient(create_app(engine)) as client:
        assert client.get("/health").status_code == 200
        getattr(engine.worker._process, signal_)()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and client.get("/health").status_code == 200:
            time.sleep(0.05)
        health = client.get("/health")
        assert health.status_code == 503 and said in health.json()["error"]["message"]
        r = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4})
        assert r.status_code == 500 and said in r.json()["error"]["message"]


@pytest.mark.slow
def test_an_engine_process_bounds_the_requests_waiting_and_restarts_with_its_counters(tiny_ar_dir):
    engine = _process_engine(tiny_ar_dir, max_queue=1, max_batch_size=1)
    body = {"messages": MSG, "max_tokens": 64, "temperature": 0}
    with TestClient(create_app(engine)) as client, ThreadPoolExecutor(6) as pool:
        statuses = sorted(r.status_code for r in pool.map(lambda _: client.post("/v1/chat/completions", json=body),
                                                          range(6)))
        assert statuses[0] == 200 and statuses[-1] == 503, statuses   # one running, one waiting: the rest refused
        assert client.get("/health").json()["queue_depth"] == 0
        steps = _metric(client.get("/metrics").text, "decode_steps_total")
        assert steps > 0
    with TestClient(create_app(engine)) as client:   # a second app: a new engine process, the counters go on
        assert client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 4}).status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _metric(client.get("/metrics").text, "decode_steps_total") <= steps:
            time.sleep(0.05)
        assert _metric(client.get("/metrics").text, "decode_steps_total") > steps


def test_an_engine_process_that_cannot_load_says_why(tmp_path, tiny_ar_dir):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_ar_dir.iterdir():
        if f.suffix != ".safetensors":
            (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    engine = _process_engine(broken)
    with pytest.raises(EngineProcessFailed, match="failed to start") as caught:
        engine.start()
    assert "safetensors" in str(caught.value).lower()


def test_engine_process_needs_a_source(tiny_ar_dir):
    with pytest.raises(ValueError, match="engine_process needs the checkpoint's source"):
        Engine(load_tokenizer(tiny_ar_dir), _config(engine_process=True))
