"""The paper's ``WM_ENDPOINT=http://localhost:30000/predict`` against our WM proxy in front of a real upstream.

Both servers run on loopback ports (uvicorn in threads): the native server with a tiny random SDAR model,
the proxy before it. The client below is written here from the paper's plugins (``sciworld_plugin.py``,
``appworld_plugin.py`` of patronus-ai/mdlm_world_modeling): ``requests`` POSTs ``{"input": {...}}`` to the
endpoint, ``raise_for_status()``, then reads ``data.get("output", data)["generated_text"]``. Greedy decoding,
so ``/predict`` and ``/`` must give the same text.
"""

from __future__ import annotations

import socket

import pytest
import requests

uvicorn = pytest.importorskip("uvicorn")

from tests.loopback import native_stack, serving  # noqa: E402
from textwm.clients.retry import RetryPolicy  # noqa: E402
from textwm.serving.proxy import ProxyConfig, create_proxy_app  # noqa: E402

#: The ScienceWorld plugin's payload shape: state a list of messages, action an assistant message list.
SCIWORLD_INPUT = {"state": [{"role": "user", "content": "This room is called the hallway."}],
                  "action": [{"role": "assistant", "content": "go to kitchen"}],
                  "system_prompt": "You are a ScienceWorld simulator.", "max_tokens": 8, "num_diffusion_steps": 4}
#: The AppWorld plugin's (its max_tokens, 2048, cut for a CPU test): an empty action list is a valid action.
APPWORLD_INPUT = {"state": [{"role": "user", "content": "Find my latest Spotify playlist."}], "action": [],
                  "system_prompt": "You simulate AppWorld APIs.", "max_tokens": 8, "num_diffusion_steps": 1}




def paper_call_world_model(endpoint: str, inp: dict) -> str:
    """The paper plugins' local-WM call, minus their catch-all: raises on a non-2xx answer."""
    resp = requests.Session().post(endpoint, json={"input": inp}, timeout=60)
    resp.raise_for_status()
    data = resp.json()
    return data.get("output", data).get("generated_text", "")


@pytest.fixture(scope="module")
def stack(tiny_sdar_dir):
    with native_stack(tiny_sdar_dir) as (upstream, proxy, _):
        yield {"upstream": upstream, "proxy": proxy}


def proxy_counts(url: str) -> dict[str, int]:
    """``textwm_proxy_responses_total`` by status."""
    counts = {}
    for line in requests.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("textwm_proxy_responses_total{"):
            status = line.split('status="', 1)[1].split('"', 1)[0]
            counts[status] = int(float(line.rsplit(" ", 1)[1]))
    return counts


@pytest.mark.parametrize("inp", [SCIWORLD_INPUT, APPWORLD_INPUT], ids=["sciworld", "appworld"])
def test_predict_is_the_payload_route(stack, inp):
    text = paper_call_world_model(stack["proxy"] + "/predict", inp)
    assert text and text == paper_call_world_model(stack["proxy"] + "/", inp)
    body = requests.post(stack["proxy"] + "/predict", json={"input": inp}, timeout=60).json()
    assert set(body) == {"generated_text", "usage"} and body["generated_text"] == text
    assert body["usage"]["completion_tokens"] >= 1
    bare = requests.post(stack["proxy"] + "/predict", json=inp, timeout=60).json()   # the object without "input"
    assert bare["generated_text"] == text


def test_predict_failures_are_counted_non_2xx_as_on_the_root(stack):
    """The paper's proxies answered 200 ``{"generated_text": "", "error"}``; ours fail, and count it."""
    before = proxy_counts(stack["proxy"])
    r = requests.post(stack["proxy"] + "/predict", json={"input": {**SCIWORLD_INPUT, "steps": 4}}, timeout=30)
    assert r.status_code == 422 and "steps" in r.json()["error"]["message"]
    r = requests.post(stack["proxy"] + "/predict", json={"input": {"state": "s"}}, timeout=30)
    assert r.status_code == 422 and "missing field(s): action" in r.json()["error"]["message"]
    r = requests.post(stack["proxy"] + "/predict", json={"input": {**SCIWORLD_INPUT, "max_tokens": 5000}}, timeout=30)
    assert r.status_code == 400 and "max_model_len" in r.json()["error"]["message"]   # the upstream's, passed back
    after = proxy_counts(stack["proxy"])
    assert {s: after.get(s, 0) - before.get(s, 0) for s in ("400", "422")} == {"400": 1, "422": 2}


def test_predict_with_the_upstream_down_is_a_502_the_paper_client_raises_on():
    with socket.socket() as s:                                              # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    config = ProxyConfig(upstream=dead, timeout_s=5, retry=RetryPolicy(max_retries=0))
    with serving(create_proxy_app(config, host="127.0.0.1")) as proxy:
        r = requests.post(proxy + "/predict", json={"input": SCIWORLD_INPUT}, timeout=30)
        assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
        assert "unreachable" in r.json()["error"]["message"]
        with pytest.raises(requests.HTTPError, match="502"):
            paper_call_world_model(proxy + "/predict", SCIWORLD_INPUT)
        assert proxy_counts(proxy) == {"502": 2}
