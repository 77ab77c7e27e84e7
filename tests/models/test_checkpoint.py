import json

import pytest
import torch

from textwm.models.checkpoint import CheckpointError, ModelSpec, convert_checkpoint, load_model, read_spec


def test_tiny_sdar_checkpoint_round_trips(tiny_sdar_dir):
    config = json.loads((tiny_sdar_dir / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["architectures"] == ["SDARForCausalLM"]
    spec = read_spec(tiny_sdar_dir)
    assert (spec.family, spec.block_size) == ("sdar", 8)
    loaded = load_model(tiny_sdar_dir, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    assert spec.mask_token_id == tok.mask_token_id == tok.convert_tokens_to_ids("<|MASK|>")
    assert set(spec.stop_ids) == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    assert type(loaded.model).__name__ == "SDARForCausalLM"
    # The weights are plain Qwen3 tensors: a Qwen3ForCausalLM reading them computes the same logits.
    from transformers import Qwen3Config, Qwen3ForCausalLM
    qwen = Qwen3ForCausalLM.from_pretrained(
        tiny_sdar_dir, config=Qwen3Config(**{k: v for k, v in config.items() if k not in ("model_type", "architectures")}))
    ids = torch.tensor([[5, 17, 42, 9]])
    assert torch.allclose(loaded.model(ids).logits, qwen(ids).logits, atol=1e-6)


def test_tiny_ar_checkpoint_is_a_plain_causal_lm(tiny_ar_dir):
    spec = read_spec(tiny_ar_dir)
    assert (spec.family, spec.model_type, spec.mask_token_id) == ("ar", "qwen3", None)
    with pytest.raises(CheckpointError, match="no mask_token_id.*convert_checkpoint.py"):
        spec.require_diffusion(4)


def test_convert_qwen3_to_sdar_keeps_weights(tiny_ar_dir, tmp_path):
    out = convert_checkpoint(tiny_ar_dir, tmp_path / "sdar", block_size=4)
    spec = read_spec(out)
    assert (spec.family, spec.model_type, spec.block_size) == ("sdar", "sdar", 4)
    before = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    after = load_model(out, device="cpu", dtype="float32")
    assert after.tokenizer.mask_token == "<|MASK|>" and spec.mask_token_id == after.tokenizer.mask_token_id
    assert after.model.get_input_embeddings().weight.shape[0] > spec.mask_token_id
    ids = torch.tensor([[3, 14, 15, 9, 2]])
    assert torch.allclose(before.model(ids).logits[..., :-1],
                          after.model(ids).logits[..., : before.model.config.vocab_size - 1], atol=1e-5)
    with pytest.raises(CheckpointError, match="new folder"):
        convert_checkpoint(out, out, block_size=4)


def test_convert_qwen2_marks_diffusion(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.conftest import TINY_CORPUS
    from textwm.models.tiny import train_tokenizer

    tok = train_tokenizer(TINY_CORPUS, vocab_size=300)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    model.save_pretrained(tmp_path / "q2")
    tok.save_pretrained(tmp_path / "q2")
    out = convert_checkpoint(tmp_path / "q2", tmp_path / "q2_sdar", block_size=4)
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["diffusion"], config["block_size"]) == ("qwen2", "sdar", 4)
    assert read_spec(out).family == "sdar"


def test_block_length_must_divide_the_models():
    spec = ModelSpec(path="m", family="sdar", model_type="sdar", block_size=8, mask_token_id=3, stop_ids=(1,),
                     pad_token_id=0)
    spec.require_diffusion(4)
    with pytest.raises(CheckpointError, match="block length 3 does not divide the model's block_size 8"):
        spec.require_diffusion(3)


def test_missing_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        read_spec(tmp_path)
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        read_spec(tmp_path / "nope")


def test_unreachable_hub_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="downloading it from the Hugging Face Hub failed"):
        read_spec("JetLM/SDAR-8B-Chat")
