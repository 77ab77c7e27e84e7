"""The native server started with the paper's lmdeploy flags decodes by lmdeploy's rules (app in-process)."""

import dataclasses

import pytest
from fastapi.testclient import TestClient

from tests.generation.lmdeploy_reference import lmdeploy_reference, untie_head
from textwm.config import ConfigCLI
from textwm.models.checkpoint import load_model
from textwm.serving.app import create_app
from textwm.serving.cli import ServerConfig
from textwm.serving.engine import Engine
from textwm.serving.protocol import ChatCompletionRequest

MSG = [{"role": "system", "content": "You are a world model."},
       {"role": "user", "content": "State: You are in the kitchen.\n\nAction: open door"}]
#: ``lmdeploy serve api_server <ckpt> --dllm-block-length 8 --dllm-denoising-steps 1`` (the paper's WM server)
PAPER_FLAGS = ["--dllm-block-length", "8", "--dllm-denoising-steps", "1"]


@pytest.fixture(scope="module")
def loaded(tiny_sdar_dir):
    return untie_head(load_model(tiny_sdar_dir, device="cpu", dtype="float32"))


def _serve(loaded, tiny_sdar_dir, *flags):
    config = ConfigCLI(ServerConfig).parse(["--model-path", str(tiny_sdar_dir), "--temperature", "0", *flags])[0]
    return config, Engine(loaded, config.engine_config())


def _complete(engine, max_tokens=20):
    with TestClient(create_app(engine)) as client:
        r = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_papers_flags_serve_with_lmdeploy_rules(loaded, tiny_sdar_dir):
    config, engine = _serve(loaded, tiny_sdar_dir, *PAPER_FLAGS)
    d = config.decode
    assert (d.sdar_rules, d.block_length, d.denoising_steps, d.remasking_strategy, d.confidence_threshold) == \
        ("lmdeploy", 8, 1, "low_confidence_dynamic", 0.85)
    body = _complete(engine)
    prompt = engine.encode(ChatCompletionRequest(messages=MSG))
    tokens, reason, forwards = lmdeploy_reference(loaded.model, prompt, mask_id=loaded.spec.mask_token_id,
                                                  stop_ids=loaded.spec.stop_ids,
                                                  settings=dataclasses.replace(d, gen_length=20))
    choice = body["choices"][0]
    assert choice["message"]["content"] == loaded.tokenizer.decode(tokens, skip_special_tokens=True)
    assert choice["message"]["content"] and choice["finish_reason"] == reason
    # The server's engine fuses each commit into the next block's first forward: fewer forwards than lmdeploy's.
    served = body["usage"]["decoder_forwards"]
    assert 0 < served < forwards
    # The same block length and steps in our own spelling keep generate.py's rules: one forward a block.
    _, generate_engine = _serve(loaded, tiny_sdar_dir, "--block-length", "8", "--denoising-steps", "1")
    assert generate_engine.config.defaults.sdar_rules == "generate"
    assert _complete(generate_engine)["usage"]["decoder_forwards"] < served


def test_the_papers_flags_on_a_block_4_checkpoint_and_request_steps_are_ignored(tmp_path, caplog):
    """The paper trained block 4 and served --dllm-block-length 8: lmdeploy never reads block_size, so neither
    do its rules here (a warning); its plugins sent num_diffusion_steps, which lmdeploy ignores, and so do we."""
    from tests.conftest import TINY_CORPUS
    from textwm.models.tiny import build_tiny_checkpoint

    ckpt = build_tiny_checkpoint(tmp_path / "sdar_b4", TINY_CORPUS, family="sdar", block_size=4, vocab_size=400,
                                 seed=1)
    loaded = untie_head(load_model(ckpt, device="cpu", dtype="float32"))
    _, engine = _serve(loaded, ckpt, *PAPER_FLAGS, "--remasking-strategy", "low_confidence_static")
    with caplog.at_level("WARNING"), TestClient(create_app(engine)) as client:  # an engine serves one app's life
        plain = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 20}).json()
        sent = client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 20,
                                                         "num_diffusion_steps": 4, "block_length": 2}).json()
    assert sent["choices"] == plain["choices"] and sent["usage"] == plain["usage"]
    assert "does not divide the model's block_size 4" in caplog.text
    assert "num_diffusion_steps" not in caplog.text and "denoising_steps, block_length" in caplog.text
    # Under generate.py rules the same block length is refused, with what to do instead.
    with pytest.raises(ValueError, match="sdar_rules=lmdeploy"):
        _serve(loaded, ckpt, "--block-length", "8")
