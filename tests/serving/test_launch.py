import dataclasses
import json
import logging

import pytest

from tests.conftest import run_script
from textwm.config import ConfigCLI, ConfigError
from textwm.generation.settings import DecodeSettings
from textwm.serving.cli import ServerConfig, StackConfig, stack_main
from textwm.serving.launch import (
    LMDEPLOY_MASK_TOKEN_ID,
    BackendSpec,
    DllmFlags,
    health_url,
    proxy_command,
    server_command,
    server_decode_defaults,
    with_dllm_flags,
)

PAPER_FLAGS = ["--dllm-block-length", "8", "--dllm-denoising-steps", "1"]   # the paper's lmdeploy launch line


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


def _sdar_checkpoint(path, **config):
    """A checkpoint folder as read_spec sees it (config.json only): enough for the launcher's checks."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "sdar", "eos_token_id": 151645, **config}))
    return str(path)


def test_lmdeploy_spellings_select_lmdeploy_rules_in_one_place():
    plain = DecodeSettings()
    assert with_dllm_flags(plain, DllmFlags()) is plain
    paper = with_dllm_flags(plain, DllmFlags(dllm_block_length=8, dllm_denoising_steps=1))
    assert (paper.sdar_rules, paper.block_length, paper.denoising_steps) == ("lmdeploy", 8, 1)
    assert (paper.remasking_strategy, paper.confidence_threshold) == ("low_confidence_dynamic", 0.85)
    other = with_dllm_flags(plain, DllmFlags(dllm_unmasking_strategy="sequential", dllm_confidence_threshold=0.9))
    assert (other.sdar_rules, other.remasking_strategy, other.confidence_threshold) == ("lmdeploy", "sequential", 0.9)
    # the server and the stack launcher both apply them
    server = ConfigCLI(ServerConfig).parse(["--model-path", "m", *PAPER_FLAGS])[0]
    assert server.decode == dataclasses.replace(server_decode_defaults(), block_length=8, denoising_steps=1,
                                                sdar_rules="lmdeploy")
    assert ConfigCLI(ServerConfig).parse(["--model-path", "m", "--block-length", "8"])[0].decode.sdar_rules == \
        "generate"
    stack = ConfigCLI(StackConfig).parse(["start", "--backend", "native", "--model-path", "m", *PAPER_FLAGS])[0]
    argv = server_command(stack.server)
    assert (_flag(argv, "--sdar-rules"), _flag(argv, "--block-length"), _flag(argv, "--denoising-steps")) == \
        ("lmdeploy", "8", "1")
    with pytest.raises(ConfigError, match="must be one of"):
        ConfigCLI(StackConfig).parse(["start", "--model-path", "m", "--dllm-unmasking-strategy", "entropy_bounded"])


def test_lmdeploy_gets_the_checkpoints_block_size_unless_one_is_given(tmp_path):
    ckpt = _sdar_checkpoint(tmp_path / "ckpt", block_size=8, mask_token_id=LMDEPLOY_MASK_TOKEN_ID)
    def block(**kw):
        return _flag(server_command(BackendSpec(backend="lmdeploy", model_path=ckpt, **kw)), "--dllm-block-length")
    assert block() == "8"                                         # not lmdeploy's own default of 4
    assert block(dllm=DllmFlags(dllm_block_length=4)) == "4"
    assert block(decode=DecodeSettings(block_length=2)) == "2"
    stack = ConfigCLI(StackConfig).parse(["print-command", "--backend", "lmdeploy", "--model-path", ckpt,
                                          *PAPER_FLAGS])[0]
    argv = server_command(stack.server)
    assert (_flag(argv, "--dllm-block-length"), _flag(argv, "--dllm-denoising-steps"),
            _flag(argv, "--dllm-unmasking-strategy"), _flag(argv, "--dllm-confidence-threshold")) == \
        ("8", "1", "low_confidence_dynamic", "0.85")


def test_lmdeploy_refuses_a_checkpoint_with_another_mask_id(tmp_path, tiny_sdar_dir, capsys):
    ckpt = _sdar_checkpoint(tmp_path / "ckpt", block_size=4, mask_token_id=7)
    with pytest.raises(ValueError, match=r"mask_token_id 7 is not 151669.*configurations/sdar.py"):
        server_command(BackendSpec(backend="lmdeploy", model_path=ckpt))
    assert stack_main(["print-command", "--backend", "lmdeploy", "--model-path", str(tiny_sdar_dir)]) == 2
    out = capsys.readouterr()
    assert "lmdeploy hard-codes" in out.err and not out.out
    assert server_command(BackendSpec(backend="native", model_path=ckpt))[1:4] == ["-m", "textwm.serving", "server"]


def test_lmdeploy_on_a_hub_id_prints_the_command_with_a_notice(caplog):
    with caplog.at_level(logging.WARNING, logger="textwm.serving.launch"):
        argv = server_command(BackendSpec(backend="lmdeploy", model_path="JetLM/SDAR-8B-Chat"))
    assert _flag(argv, "--dllm-block-length") == "4"
    assert "not a local folder" in caplog.text and "mask_token_id were not checked" in caplog.text
    res = run_script("scripts/wm_stack.py", "print-command", "--backend", "lmdeploy", "--model-path",
                     "JetLM/SDAR-8B-Chat", *PAPER_FLAGS)
    assert res.returncode == 0, res.stderr
    assert "--dllm-block-length 8 --dllm-denoising-steps 1" in res.stdout and "notice" in res.stderr


def test_stop_leaves_alone_a_process_the_pid_file_no_longer_names(tmp_path):
    """A stale pid file whose pid now belongs to another process: not our group leader, or one started at
    another time. ``stop`` signals neither, and a process we did start is still stopped."""
    import subprocess
    import sys

    from textwm.serving.launch import ManagedProcess

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    stranger = subprocess.Popen(sleeper)                               # in our process group: not a leader
    other_leader = subprocess.Popen(sleeper, start_new_session=True)   # a leader, started at another time
    try:
        managed = ManagedProcess("wm", tmp_path)
        managed.pid_file.write_text(f"{stranger.pid}\n")
        assert managed.pid() is None and managed.stop() is False and stranger.poll() is None
        managed.pid_file.write_text(f"{other_leader.pid} 1\n")
        assert managed.pid() is None and managed.stop() is False and other_leader.poll() is None
        ours = managed.start(sleeper)
        assert managed.pid() == ours and len(managed.pid_file.read_text().split()) == 2
        assert managed.stop(grace_s=5) is True and managed.pid() is None
    finally:
        for p in (stranger, other_leader):
            p.kill()
            p.wait()
