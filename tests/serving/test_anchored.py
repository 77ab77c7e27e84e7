"""Anchored requests (``response_template``) on the native server, chat and completions, and through the proxy.

Real servers on loopback ports (uvicorn in threads), a tiny random SDAR model, greedy decoding.
"""

from __future__ import annotations

import pytest
import requests

uvicorn = pytest.importorskip("uvicorn")

from tests.loopback import native_stack  # noqa: E402

MSG = [{"role": "system", "content": "You are a world model."},
       {"role": "user", "content": "State: You are in the kitchen.\n\nAction: go to countertop 1"}]
TEMPLATE = ["You arrive at countertop 1. On the countertop 1, you see ", {"fill": 6}, ", and ", {"fill": 4}, "."]


@pytest.fixture(scope="module")
def stack(tiny_sdar_dir):
    with native_stack(tiny_sdar_dir) as (upstream, proxy, _):
        yield {"upstream": upstream, "proxy": proxy}


def fixed_in_order(text: str, template: list) -> bool:
    """The template's fixed strings stand in ``text`` in order, the first at the start."""
    at = 0
    for i, part in enumerate(template):
        if isinstance(part, str):
            found = text.find(part, at)
            if found < 0 or (i == 0 and found != 0):
                return False
            at = found + len(part)
    return True


def test_an_anchored_chat_answer_keeps_every_fixed_string(stack):
    r = requests.post(stack["upstream"] + "/v1/chat/completions", timeout=60, json={
        "messages": MSG, "max_tokens": 16, "temperature": 0, "n": 2, "response_template": TEMPLATE})
    assert r.status_code == 200, r.text
    body = r.json()
    texts = [c["message"]["content"] for c in body["choices"]]
    assert texts[0] == texts[1] and fixed_in_order(texts[0], TEMPLATE) and texts[0].endswith(".")
    assert 0 < body["usage"]["completion_tokens"] <= 2 * 10          # only slot tokens count
    assert body["choices"][0]["finish_reason"] == "stop"
    metrics = requests.get(stack["upstream"] + "/metrics", timeout=10).text
    assert "textwm_anchored_requests_total" in metrics


def test_an_anchored_completion_with_an_open_last_slot(stack):
    template = ["This room is called the ", {"fill": 3}, ". In it, you see: ", {}]
    r = requests.post(stack["upstream"] + "/v1/completions", timeout=60, json={
        "prompt": "State: hallway\n\nAction: go to kitchen\n", "max_tokens": 12, "temperature": 0,
        "response_template": template})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert fixed_in_order(choice["text"], template) and choice["finish_reason"] in ("stop", "length")
    assert r.json()["usage"]["completion_tokens"] <= 12


@pytest.mark.parametrize(("extra", "message"), [
    ({"response_template": []}, "non-empty list"),
    ({"response_template": ["no slot"]}, "has no slot"),
    ({"response_template": ["a", {"fill": 0}]}, "fill must be a positive integer"),
    ({"response_template": ["a", {"fill": 20}]}, "more than max_tokens=16"),
    ({"response_template": ["a", {"fill": 2}], "stream": True}, "send stream=false"),
    ({"response_template": ["a", {"fill": 2}], "stop": ["x"]}, "leave stop out"),
])
def test_bad_templates_get_a_400_naming_the_problem(stack, extra, message):
    r = requests.post(stack["upstream"] + "/v1/chat/completions", timeout=60,
                      json={"messages": MSG, "max_tokens": 16, **extra})
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"]


def test_the_proxy_forwards_a_template(stack):
    inp = {"system_prompt": "You are a world model.", "state": "You are in the kitchen.", "action": "look",
           "max_tokens": 12, "response_template": ["You see ", {"fill": 5}, " here."]}
    r = requests.post(stack["proxy"] + "/", json={"input": inp}, timeout=60)
    assert r.status_code == 200, r.text
    text = r.json()["generated_text"]
    assert text.startswith("You see ") and text.endswith(" here.")
    bad = requests.post(stack["proxy"] + "/", json={"input": {**inp, "response_template": ["x"]}}, timeout=60)
    assert bad.status_code == 400 and "has no slot" in bad.json()["error"]["message"]


def test_the_server_fills_templates_in_its_engine_as_the_reference_decoder(stack, tiny_sdar_dir):
    """Anchored requests join the continuous engine's rows, beside plain requests sent at the same time; greedy,
    each answer is the reference decoder's."""
    from concurrent.futures import ThreadPoolExecutor

    from textwm.generation.anchors import lay_out, parse_template
    from textwm.generation.decoders import reference_decoder
    from textwm.generation.settings import DecodeSettings
    from textwm.models.checkpoint import load_model

    prompts = [f"State: room {i}\n\nAction: look\n" for i in range(4)]
    body = {"max_tokens": 16, "temperature": 0}

    def anchored(prompt):
        r = requests.post(stack["upstream"] + "/v1/completions", timeout=120,
                          json={"prompt": prompt, **body, "response_template": TEMPLATE})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    def plain(prompt):
        r = requests.post(stack["upstream"] + "/v1/completions", timeout=120, json={"prompt": prompt, **body})
        assert r.status_code == 200, r.text

    with ThreadPoolExecutor(8) as pool:
        served = list(pool.map(anchored, prompts))
        list(pool.map(plain, prompts))
    loaded = load_model(tiny_sdar_dir, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    ids = [tok(p, add_special_tokens=True)["input_ids"] for p in prompts]
    layout = lay_out(parse_template(TEMPLATE, max_tokens=16), lambda t: tok.encode(t, add_special_tokens=False), 16)
    settings = DecodeSettings(gen_length=16, temperature=0)
    reference = reference_decoder(loaded.model, loaded.spec, pad_token_id=tok.pad_token_id).generate_anchored(
        ids, [layout] * len(ids), settings, lambda t: tok.decode(t, skip_special_tokens=True))
    assert served == [a.text for a in reference]
