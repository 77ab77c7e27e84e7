"""The native server as the official ``openai`` client sees it: a real uvicorn server on a loopback port.

One module-scoped server per family (tiny random models built in code, continuous batching); SDAR is
in the fast tier, WeDLM and AR in the slow one. Greedy decoding throughout, so a stream's deltas must
join to the plain response's text.
"""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from tests.loopback import serving as running
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.serving.app import create_app
from textwm.serving.engine import Engine, EngineConfig
from textwm.serving.scheduler import ContinuousScheduler

MODEL = "tiny-wm"
MSG = [{"role": "system", "content": "You are a world model."},
       {"role": "user", "content": "State: You are in the kitchen.\n\nAction: open door"}]
LOOK = [{"role": "user", "content": "look around"}]
PROMPT = "The door"




@pytest.fixture(scope="module", params=["sdar", pytest.param("wedlm", marks=pytest.mark.slow),
                                        pytest.param("ar", marks=pytest.mark.slow)])
def server(request):
    checkpoint = request.getfixturevalue(f"tiny_{request.param}_dir")
    loaded = load_model(checkpoint, device="cpu", dtype="float32")
    engine = Engine(loaded, EngineConfig(served_model_name=MODEL, max_model_len=512, max_batch_size=8,
                                         defaults=DecodeSettings(gen_length=16, temperature=0)))
    with running(create_app(engine, host="127.0.0.1")) as url:
        assert isinstance(engine.scheduler, ContinuousScheduler)
        yield {"url": url, "engine": engine, "family": request.param}


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server["url"] + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def chat_stream(client, messages=MSG, **kw):
    return list(client.chat.completions.create(model=MODEL, messages=messages, stream=True, **kw))


def joined(chunks, index=0, field="content"):
    parts = []
    for c in chunks:
        for choice in c.choices:
            if choice.index == index:
                parts.append((getattr(choice.delta, field) if field == "content" else choice.text) or "")
    return "".join(parts)


def finish(chunks, index=0):
    reasons = [ch.finish_reason for c in chunks for ch in c.choices if ch.index == index and ch.finish_reason]
    assert len(reasons) == 1, reasons
    return reasons[0]


@pytest.mark.parametrize("messages", [MSG, LOOK])
def test_chat_stream_joins_to_the_plain_response(client, messages):
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
    assert plain.object == "chat.completion" and plain.choices[0].message.role == "assistant"
    text = plain.choices[0].message.content
    chunks = chat_stream(client, messages, max_tokens=24, temperature=0, stream_options={"include_usage": True})
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    assert len({c.id for c in chunks}) == 1
    assert joined(chunks) == text
    assert finish(chunks) == plain.choices[0].finish_reason
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == plain.usage.completion_tokens <= 24
    assert usage.usage.prompt_tokens == plain.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_plain_stream_token_ids_and_echo(server, client):
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0)
    assert plain.object == "text_completion"
    text = plain.choices[0].text
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert joined(chunks, field="text") == text and finish(chunks) == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    ids = server["engine"].tokenizer(PROMPT, add_special_tokens=True)["input_ids"]
    for prompt in ([PROMPT], ids):                                # a list of one string, a list of token ids
        same = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0)
        assert same.choices[0].text == text and same.usage.prompt_tokens == len(ids)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0, echo=True)
    assert echoed.choices[0].text == PROMPT + text
    many = client.completions.create(model=MODEL, prompt=[PROMPT, "Nothing happens."], n=2, max_tokens=8,
                                     temperature=0)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]        # prompt p, choice i: index p * n + i
    texts = [c.text for c in many.choices]
    assert texts[0] == texts[1] and texts[2] == texts[3]            # greedy: the copies of a prompt agree


def _stop_in(text):
    """A 3-character stop string from the middle of ``text`` (it may occur earlier too)."""
    if len(text) < 6:
        pytest.skip(f"the tiny model's output {text!r} is too short to hold a stop string")
    return text[len(text) // 2:][:3]


def test_stop_strings_end_chat_and_completion_streams(client):
    text = client.chat.completions.create(model=MODEL, messages=LOOK, max_tokens=32,
                                          temperature=0).choices[0].message.content
    stop = _stop_in(text)
    chunks = chat_stream(client, LOOK, max_tokens=32, temperature=0, stop=["never-there", stop])
    deltas = [ch.delta.content for c in chunks for ch in c.choices if ch.delta.content]
    assert "".join(deltas) == text[:text.find(stop)] and finish(chunks) == "stop"
    assert not any(stop in d for d in deltas)
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0).choices[0].text
    stop = _stop_in(plain)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
                                            stop=stop, stream=True))
    assert joined(chunks, field="text") == plain[:plain.find(stop)] and finish(chunks) == "stop"


def test_n_choices_in_a_stream_carry_their_indices(client):
    plain = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=12, temperature=0, n=3)
    chunks = chat_stream(client, max_tokens=12, temperature=0, n=3)
    assert {ch.index for c in chunks for ch in c.choices} == {0, 1, 2}
    for i in range(3):
        roles = [ch.delta.role for c in chunks for ch in c.choices if ch.index == i and ch.delta.role]
        assert roles == ["assistant"] and joined(chunks, i) == plain.choices[i].message.content
        assert finish(chunks, i) == plain.choices[i].finish_reason
    sampled = chat_stream(client, max_tokens=12, temperature=1.0, seed=3, n=2)
    assert {ch.index for c in sampled for ch in c.choices} == {0, 1}


def test_errors_are_the_clients_exception_types(client):
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError, match="not served here"):
            client.chat.completions.create(model="gpt-4", messages=MSG, stream=stream)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt=PROMPT)
    with pytest.raises(openai.UnprocessableEntityError, match="denoise_steps"):
        client.chat.completions.create(model=MODEL, messages=MSG, stream=True, extra_body={"denoise_steps": 2})
    with pytest.raises(openai.UnprocessableEntityError, match="suffix"):
        client.completions.create(model=MODEL, prompt=PROMPT, suffix="after")
    with pytest.raises(openai.BadRequestError, match="max_model_len"):
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5000, stream=True)
    with pytest.raises(openai.BadRequestError, match="outside the model's vocabulary"):
        client.completions.create(model=MODEL, prompt=[1, 2, 10**6])


def test_the_wire_format_and_the_metrics(server):
    body = {"model": MODEL, "messages": MSG, "max_tokens": 6, "temperature": 0, "stream": True}
    with httpx.stream("POST", server["url"] + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])
    assert '"usage"' not in raw                                    # no include_usage: no usage key at all
    metrics = httpx.get(server["url"] + "/metrics").text
    for name in ("rows_running", "rows_per_step", "decode_steps_total", "queue_depth", "tokens_per_second"):
        assert f"textwm_{name}{{" in metrics
    steps = next(line for line in metrics.splitlines() if line.startswith("textwm_decode_steps_total"))
    assert float(steps.split()[-1]) > 0


def test_an_error_after_the_stream_started_is_an_error_event(server, client):
    scheduler = server["engine"].scheduler
    real = scheduler.engine.step
    calls = {"n": 0}

    def fail_second_step():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA error: device-side assert (simulated)")
        return real()

    scheduler.engine.step = fail_second_step      # the scheduler builds a fresh engine after the failure
    stream = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=64, temperature=0, stream=True)
    with pytest.raises(openai.APIError, match="device-side assert"):
        list(stream)
    assert calls["n"] == 2
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4).choices  # serving on
    metrics = httpx.get(server["url"] + "/metrics").text
    assert f'textwm_stream_errors_total{{model="{MODEL}"}} 1' in metrics


def long_request(server, client):
    """A greedy chat request that decodes 400 tokens (checked once per server; skip if the model stops early)."""
    long = dict(model=MODEL, messages=MSG, max_tokens=400, temperature=0)
    if "long" not in server:
        server["long"] = client.chat.completions.create(**long).usage.completion_tokens == 400
    if not server["long"]:
        pytest.skip("the tiny model stops early: no long request")
    return long


def test_a_client_that_goes_away_frees_its_rows(server, client):
    engine = server["engine"]
    long = long_request(server, client)

    def gone_before_the_end(leave):
        before = engine.metrics.generated_tokens
        leave()
        deadline = time.monotonic() + 10
        while engine.scheduler.engine.num_active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.scheduler.engine.num_active == 0
        assert engine.metrics.generated_tokens - before < 400     # its rows left before their end

    def close_a_stream():
        stream = client.chat.completions.create(**long, stream=True)
        next(stream)                                              # the role chunk: the request is decoding
        stream.close()

    def time_out_a_plain_request():
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server["url"] + "/v1/chat/completions", json=long, timeout=httpx.Timeout(10, read=0.3))

    gone_before_the_end(close_a_stream)
    gone_before_the_end(time_out_a_plain_request)


def test_requests_join_running_rows_and_other_settings_wait_for_them_to_drain(server, client):
    engine = server["engine"]
    long = long_request(server, client)
    stream = client.chat.completions.create(**long, stream=True)
    next(stream)
    short = client.chat.completions.create(model=MODEL, messages=LOOK, max_tokens=4, temperature=0.8, top_p=0.9)
    assert short.usage.completion_tokens > 0 and engine.scheduler.engine.num_active == 1  # joined the greedy rows
    answers = []
    other = threading.Thread(target=lambda: answers.append(client.chat.completions.create(
        model=MODEL, messages=LOOK, max_tokens=4, temperature=0, seed=7)))       # a seed: other settings
    other.start()
    time.sleep(0.5)
    assert not answers and engine.queue_depth == 1                 # waits for the running rows to drain
    stream.close()                                                 # ... which they do once the client goes
    other.join(30)
    assert answers and answers[0].choices[0].message.content is not None
