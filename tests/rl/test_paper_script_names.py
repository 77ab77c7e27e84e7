"""The paper's command lines run here unchanged: its run-script names, its ``wm_proxy.py``, its env switches.

Each launcher under a paper name runs with ``--print-command`` (the swift line, swift never starts) from its env
folder, as the paper's READMEs do, with the paper's ``CUDA_VISIBLE_DEVICES``; the line must carry the paper's
values (read from ``patronus-ai/mdlm_world_modeling``'s ``alfworld/run_*.sh`` and ``sciworld/run_*_qwenwm.sh``).
"""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serving.scripted_http import ScriptedServer
from textwm.rl.trajectory_log import trajectory_log_path

ROOT = Path(__file__).resolve().parents[2]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _print_command(folder: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``bash <script> --print-command`` run from ``folder`` with only ``env`` (plus PATH) set."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SWIFT": "swift", "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", script, "--print-command"], cwd=folder, env=full, capture_output=True, text=True,
                          timeout=60, check=False)


# script, CUDA_VISIBLE_DEVICES of the paper's README line, expected flags (None: the flag is absent)
GRPO = [
    ("alfworld/run_lfm25_alfworld_grpo.sh", "0", {"--model": "LiquidAI/LFM2.5-1.2B-Instruct", "--template": "chatml",
     "--learning_rate": "5e-07", "--num_train_epochs": "1", "--beta": "0.05", "--vllm_gpu_memory_utilization": "0.4",
     "--max_turns": "30", "--max_completion_length": "128", "--save_steps": "10", "--deepspeed": None}),
    ("alfworld/run_lfm25_grpo.sh", "0", {"--model": "LiquidAI/LFM2.5-1.2B-Instruct", "--learning_rate": "2e-06",
     "--num_train_epochs": "2", "--beta": "0.1", "--offload_model": "true", "--offload_optimizer": "true",
     "--vllm_gpu_memory_utilization": "0.5", "--save_steps": "25", "--save_total_limit": "3",
     "--dataloader_num_workers": "2", "--deepspeed": None}),
    ("alfworld/run_qwen3_alfworld_grpo.sh", "0,1", {"--model": "Qwen/Qwen3-4B-Instruct-2507",
     "--learning_rate": "5e-07", "--num_train_epochs": "1", "--vllm_gpu_memory_utilization": "0.3",
     "--deepspeed": "zero2"}),
    ("alfworld/run_qwen3_grpo.sh", "0", {"--model": "Qwen/Qwen3-4B-Instruct-2507", "--learning_rate": "1e-06",
     "--num_train_epochs": "2", "--offload_model": "true", "--save_steps": "25", "--deepspeed": None}),
    ("alfworld/run_mistral_grpo_2gpus.sh", "0,1,2,3", {"--model": "mistralai/Mistral-7B-Instruct-v0.3",
     "--template": "llama", "--learning_rate": "5e-07", "--max_completion_length": "256", "--save_steps": "5",
     "--save_total_limit": "10", "--deepspeed": "zero2"}),
    ("sciworld/run_sciworld_mistral_grpo_qwenwm.sh", "0,1,2,3", {"--model": "mistralai/Mistral-7B-Instruct-v0.3",
     "--learning_rate": "5e-07", "--num_train_epochs": "3", "--vllm_gpu_memory_utilization": "0.25",
     "--offload_model": "false", "--max_turns": "50", "--save_total_limit": "5", "--deepspeed": "zero2"}),
    ("sciworld/run_sciworld_qwen3_grpo_qwenwm.sh", "0,1,2,3", {"--model": "Qwen/Qwen3-4B-Instruct-2507",
     "--learning_rate": "5e-07", "--num_train_epochs": "3", "--vllm_gpu_memory_utilization": "0.3",
     "--save_total_limit": "5", "--deepspeed": "zero2"}),
]

SFT = [
    ("alfworld/run_lfm25_alfworld_sft.sh", {"--model": "LiquidAI/LFM2.5-1.2B-Instruct", "--template": "chatml",
     "--learning_rate": "2e-05", "--per_device_train_batch_size": "2", "--gradient_accumulation_steps": "4",
     "--num_train_epochs": "1", "--max_length": "8192", "--save_steps": "50"}),
    ("alfworld/run_qwen3_alfworld_sft.sh", {"--model": "Qwen/Qwen3-4B-Instruct-2507", "--learning_rate": "2e-06",
     "--gradient_accumulation_steps": "4", "--num_train_epochs": "1", "--max_length": "8192"}),
    ("alfworld/run_lfm25_sft.sh", {"--model": "LiquidAI/LFM2.5-1.2B-Instruct", "--learning_rate": "2e-05",
     "--gradient_accumulation_steps": "8", "--num_train_epochs": "3", "--max_length": "16384",
     "--warmup_ratio": "0.05", "--save_steps": "100", "--logging_steps": "5"}),
    ("alfworld/run_qwen3_sft.sh", {"--model": "Qwen/Qwen3-4B-Instruct-2507", "--learning_rate": "2e-06",
     "--gradient_accumulation_steps": "8", "--num_train_epochs": "3", "--max_length": "16384",
     "--save_total_limit": "5"}),
    ("alfworld/run_mistral_sft.sh", {"--model": "mistralai/Mistral-7B-Instruct-v0.3", "--template": "llama",
     "--learning_rate": "2e-06", "--num_train_epochs": "3", "--save_steps": "25"}),
]


def _check(argv: list[str], expected: dict) -> None:
    for name, value in expected.items():
        if value is None:
            assert name not in argv, (name, argv)
        else:
            assert _flag(argv, name) == value, (name, argv)


@pytest.mark.parametrize(("script", "cvd", "expected"), GRPO, ids=[s for s, _, _ in GRPO])
def test_grpo_under_the_papers_name(tmp_path, script, cvd, expected):
    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    folder, name = (ROOT / script).parent, Path(script).name
    assert os.access(ROOT / script, os.X_OK)
    res = _print_command(folder, name, {"DATA": str(data), "CUDA_VISIBLE_DEVICES": cvd})
    assert res.returncode == 0, res.stderr
    argv = res.stdout.split()
    assert argv[:4] == ["swift", "rlhf", "--rlhf_type", "grpo"] and _flag(argv, "--dataset") == str(data)
    # float32 master weights (bf16 compute) unless DeepSpeed keeps them: the paper's scripts stepped bf16 weights
    # themselves, which loses updates at these learning rates.
    deepspeed = "--deepspeed" in argv
    assert (_flag(argv, "--torch_dtype"), _flag(argv, "--use_vllm")) == ("bfloat16" if deepspeed else "float32", "true")
    assert ("--bf16" in argv) != deepspeed
    _check(argv, expected)


@pytest.mark.parametrize(("script", "expected"), SFT, ids=[s for s, _ in SFT])
def test_sft_under_the_papers_name(tmp_path, script, expected):
    data = tmp_path / "sft.jsonl"
    data.write_text("{}\n")
    folder, name = (ROOT / script).parent, Path(script).name
    assert os.access(ROOT / script, os.X_OK)
    res = _print_command(folder, name, {"DATA": str(data), "CUDA_VISIBLE_DEVICES": "0"})
    assert res.returncode == 0, res.stderr
    argv = res.stdout.split()
    assert argv[:2] == ["swift", "sft"] and _flag(argv, "--dataset") == str(data)
    assert _flag(argv, "--torch_dtype") == "float32" and _flag(argv, "--bf16") == "true" and "--deepspeed" not in argv
    _check(argv, expected)


@pytest.mark.parametrize(("script", "cvd", "deepspeed"), [
    ("alfworld/run_alfworld_qwen3_grpo.sh", "0", None),          # preset 2, the count comes from CVD
    ("alfworld/run_alfworld_mistral_grpo.sh", "0,1", "zero2"),
    ("alfworld/run_alfworld_lfm_grpo.sh", "", None),             # CVD set and empty: CPU
])
def test_preset_gpu_count_follows_cuda_visible_devices(tmp_path, script, cvd, deepspeed):
    data = tmp_path / "rl.jsonl"
    data.write_text("{}\n")
    res = _print_command((ROOT / script).parent, Path(script).name, {"DATA": str(data), "CUDA_VISIBLE_DEVICES": cvd})
    assert res.returncode == 0, res.stderr
    argv = res.stdout.split()
    assert (argv[argv.index("--deepspeed") + 1] if "--deepspeed" in argv else None) == deepspeed
    assert _flag(argv, "--torch_dtype") == ("bfloat16" if deepspeed else "float32")


def _launcher_copy(tmp_path: Path, *scripts: str) -> Path:
    """The launchers copied into a root of their own, so that their ``<env>/data/`` can be filled freely."""
    root = tmp_path / "root"
    for rel in ("scripts/lib/agent_grpo.sh", "scripts/lib/agent_sft.sh", "scripts/lib/run_module.sh", *scripts):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    shutil.copytree(ROOT / "recipes", root / "recipes")
    return root


def test_data_defaults_to_the_papers_file_and_names_it_when_missing(tmp_path):
    root = _launcher_copy(tmp_path, "alfworld/run_alfworld_lfm_grpo.sh", "alfworld/run_lfm25_sft.sh")
    env = {"CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(ROOT / "src")}
    for script, paper in (("run_alfworld_lfm_grpo.sh", "alfworld_rl.jsonl"),
                          ("run_lfm25_sft.sh", "alfworld_sft.jsonl")):
        missing = _print_command(root / "alfworld", script, env)
        assert missing.returncode == 2, missing.stdout
        assert paper in missing.stderr and "build_wm_dataset.py" in missing.stderr, missing.stderr
        (root / "alfworld" / "data").mkdir(exist_ok=True)
        (root / "alfworld" / "data" / paper).write_text("{}\n")
        found = _print_command(root / "alfworld", script, env)
        assert found.returncode == 0, found.stderr
        assert _flag(found.stdout.split(), "--dataset") == str(root / "alfworld" / "data" / paper)


def test_trajectory_log_takes_the_papers_name_too(tmp_path):
    assert trajectory_log_path(environ={"TRAJECTORY_LOG": "/tmp/a.jsonl"}) == Path("/tmp/a.jsonl")
    both = {"TRAJECTORY_LOG": "/tmp/a.jsonl", "TEXTWM_TRAJECTORY_LOG": "/tmp/b.jsonl"}
    assert trajectory_log_path(environ=both) == Path("/tmp/b.jsonl")


def test_alfworld_port_is_the_env_servers_default_port(monkeypatch):
    spec = importlib.util.spec_from_file_location("alfworld_env_server", ROOT / "alfworld" / "alfworld_env_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("ALFWORLD_PORT", "31234")
    assert module.paper_port_flags() == ["--port", "31234"]
    monkeypatch.delenv("ALFWORLD_PORT")
    assert module.paper_port_flags() == []


@pytest.mark.parametrize("folder", ["alfworld", "appworld", "sciworld"])
def test_wm_proxy_help_runs_from_the_env_folder(folder):
    res = subprocess.run([sys.executable, "wm_proxy.py", "--help"], cwd=ROOT / folder, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0 and f"{folder}/wm_proxy.py" in res.stdout and "--repetition-penalty" in res.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _upstream(method, path, body):
    """A vLLM-like WM server: one model, one fixed completion."""
    if path == "/v1/models":
        return 200, {"object": "list", "data": [{"id": "wm", "object": "model", "owned_by": "vllm"}]}, 0
    return 200, {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "The door opens."}}], "usage": {"total_tokens": 3}}, 0


def test_appworld_wm_proxy_reads_sglang_port_and_sends_the_papers_penalty():
    upstream = ScriptedServer(_upstream)
    port = _free_port()
    env = {**os.environ, "SGLANG_PORT": upstream.url.rsplit(":", 1)[1], "WM_PORT": str(port)}
    env.pop("WM_BACKEND_PORT", None)
    proc = subprocess.Popen([sys.executable, "wm_proxy.py"], cwd=ROOT / "appworld", env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.1)
        assert health.status_code == 200 and health.json()["upstream"] == upstream.url, health.text
        r = httpx.post(f"http://127.0.0.1:{port}/", timeout=30,
                       json={"input": {"system_prompt": "sys", "state": "s", "action": "a", "max_tokens": 8}})
        assert r.status_code == 200 and r.json()["generated_text"] == "The door opens.", r.text
        sent = [body for method, path, body in upstream.requests if path == "/v1/chat/completions"]
        assert sent and sent[0]["repetition_penalty"] == 1.3, json.dumps(sent)
    finally:
        proc.terminate()
        proc.wait(30)
        upstream.close()
