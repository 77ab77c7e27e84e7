import pytest

from tests.conftest import run_script
from textwm.generation.settings import DecodeSettings
from textwm.serving.launch import BackendSpec, health_url, proxy_command, server_command


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_lmdeploy_command_has_the_sdar_flags():
    argv = server_command(BackendSpec(backend="lmdeploy", model_path="models/SDAR-8B-Chat", port=30001, tp=2,
                                      max_model_len=16384, max_batch_size=64,
                                      decode=DecodeSettings(block_length=4, denoising_steps=2,
                                                            remasking_strategy="low_confidence_static",
                                                            confidence_threshold=0.9)))
    assert argv[:4] == ["lmdeploy", "serve", "api_server", "models/SDAR-8B-Chat"]
    expected = {"--backend": "pytorch", "--tp": "2", "--server-port": "30001", "--session-len": "16384",
                "--max-batch-size": "64", "--dllm-block-length": "4", "--dllm-denoising-steps": "2",
                "--dllm-unmasking-strategy": "low_confidence_static", "--dllm-confidence-threshold": "0.9"}
    for flag, value in expected.items():
        assert _flag(argv, flag) == value, flag
    assert health_url("lmdeploy", "127.0.0.1", 30001).endswith("/v1/models")


def test_lmdeploy_rejects_strategies_it_lacks():
    with pytest.raises(ValueError, match="lmdeploy supports the strategies"):
        BackendSpec(backend="lmdeploy", model_path="m", decode=DecodeSettings(remasking_strategy="entropy_bounded"))


def test_vllm_and_native_commands():
    argv = server_command(BackendSpec(backend="vllm", model_path="models/Qwen3-8B", tp=4, max_model_len=8192,
                                      served_model_name="wm"))
    assert argv[:3] == ["vllm", "serve", "models/Qwen3-8B"]
    assert (_flag(argv, "--tensor-parallel-size"), _flag(argv, "--served-model-name"),
            _flag(argv, "--max-model-len")) == ("4", "wm", "8192")
    module = server_command(BackendSpec(backend="vllm", model_path="m", vllm_python="/venv/bin/python"))
    assert module[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    native = server_command(BackendSpec(backend="native", model_path="runs/m",
                                        decode=DecodeSettings(denoising_steps=1, temperature=0.0, gen_length=16)))
    assert native[1:4] == ["-m", "textwm.serving", "server"]   # a module: no checkout path needed
    assert (_flag(native, "--denoising-steps"), _flag(native, "--temperature"), _flag(native, "--max-tokens")) == \
        ("1", "0.0", "16")
    proxy = proxy_command(30000, "http://127.0.0.1:30001", upstream_kind="lmdeploy")
    assert _flag(proxy, "--upstream-kind") == "lmdeploy" and _flag(proxy, "--port") == "30000"
    with pytest.raises(ValueError, match="backend must be one of"):
        BackendSpec(backend="sglang", model_path="m")


def test_print_command_cli():
    res = run_script("scripts/wm_stack.py", "print-command", "--backend", "lmdeploy", "--model-path", "m", "--tp", "2")
    assert res.returncode == 0, res.stderr
    server, proxy = res.stdout.strip().splitlines()
    assert server.startswith("lmdeploy serve api_server m --backend pytorch --tp 2")
    assert "-m textwm.serving proxy" in proxy and "--upstream-kind lmdeploy" in proxy
