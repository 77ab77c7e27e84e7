"""Published SDAR / WeDLM checkpoints load as what they are, without remote code.

The JSON files of the hub checkpoints are in ``fixtures/hub`` (see its README: which files are the
real ones and which are reconstructed); weights are tiny random ones built from their configs.
"""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from textwm.models.checkpoint import CheckpointError, as_autoregressive, load_model, read_spec
from textwm.models.sdar import SDARConfig, SDARMoeConfig
from textwm.models.wedlm import WeDLMConfig
from textwm.training.config import SFTConfig
from textwm.training.trainer import prepare_model

HUB = Path(__file__).parent / "fixtures" / "hub"
SDAR_STOPS = (151645, 151643)  # <|im_end|>, <|endoftext|> (generation_config.json)

#: folder -> (family, model_type, block_size, mask_token_id, stop_ids)
EXPECTED = {
    "SDAR-1.7B-Chat": ("sdar", "sdar", 4, 151669, SDAR_STOPS),
    "SDAR-4B-Chat": ("sdar", "sdar", 4, 151669, SDAR_STOPS),
    "SDAR-8B-Chat": ("sdar", "sdar", 4, 151669, SDAR_STOPS),
    "SDAR-30B-A3B-Chat": ("sdar", "sdar_moe", 4, 151669, SDAR_STOPS),
    "WeDLM-8B": ("wedlm", "wedlm", None, 151665, (151643,)),
    "WeDLM-8B-Instruct": ("wedlm", "wedlm", None, 151665, (151643, 151645)),
    "WeDLM-7B": ("wedlm", "wedlm", None, 151665, (151643,)),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_hub_configs_read_as_their_family(name, caplog):
    with caplog.at_level(logging.WARNING):
        spec = read_spec(HUB / name)
    assert (spec.family, spec.model_type, spec.block_size, spec.mask_token_id, spec.stop_ids) == EXPECTED[name]
    if spec.family == "sdar":  # both fields were filled in, and said so
        assert "no block_size: using 4, the SDAR base release's" in caplog.text
        assert "no mask_token_id: using 151669, the tokenizer's mask token <|MASK|>" in caplog.text


def test_wedlm_mask_id_is_announced_with_the_token_it_is(caplog):
    with caplog.at_level(logging.WARNING):
        read_spec(HUB / "WeDLM-8B-Instruct")
    assert "mask_token_id null: using 151665, the id WeDLM's training hard-coded" in caplog.text
    assert "ordinary token '<tool_response>'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        read_spec(HUB / "WeDLM-7B")  # Qwen2.5's tokenizer has no id 151665
    assert "no token of this checkpoint's tokenizer files has (a spare embedding row)" in caplog.text


def test_block_size_comes_from_the_config_then_the_name_suffix(tmp_path, caplog):
    b32 = shutil.copytree(HUB / "SDAR-8B-Chat", tmp_path / "SDAR-8B-Chat-b32")
    with caplog.at_level(logging.WARNING):
        assert read_spec(b32).block_size == 32
    assert "using 32, the -b32 suffix of its name" in caplog.text
    snapshot = shutil.copytree(HUB / "SDAR-8B-Chat", tmp_path / "run-b2" / "models--JetLM--SDAR-8B-Chat-b16" /
                               "snapshots" / "0123abc")  # a hub cache folder, under a folder named like a suffix
    assert read_spec(snapshot).block_size == 16
    assert read_spec(shutil.copytree(HUB / "SDAR-8B-Chat", tmp_path / "run-b2" / "SDAR-8B-Chat")).block_size == 4
    config = json.loads((b32 / "config.json").read_text())
    (b32 / "config.json").write_text(json.dumps({**config, "block_size": 16, "mask_token_id": 7}))
    spec = read_spec(b32)
    assert (spec.block_size, spec.mask_token_id) == (16, 7)
    assert read_spec(b32, mask_token_id=9).mask_token_id == 9


def test_a_wedlm_config_whose_vocabulary_lacks_the_training_mask_id_is_refused(tmp_path):
    shutil.copytree(HUB / "WeDLM-8B", tmp_path / "w")
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    (tmp_path / "w" / "config.json").write_text(json.dumps({**config, "vocab_size": 1000}))
    with pytest.raises(CheckpointError, match="has no id 151665.*set mask_token_id in config.json"):
        read_spec(tmp_path / "w")


@pytest.mark.parametrize(("name", "config_cls"), [("SDAR-4B-Chat", SDARConfig), ("SDAR-30B-A3B-Chat", SDARMoeConfig),
                                                  ("WeDLM-8B", WeDLMConfig), ("WeDLM-7B", WeDLMConfig)])
def test_hub_configs_load_with_our_classes_not_remote_code(name, config_cls):
    config = AutoConfig.from_pretrained(HUB / name)  # an auto_map to *.py files that are not here
    assert type(config) is config_cls and not hasattr(config, "auto_map")
    if name == "SDAR-30B-A3B-Chat":
        assert (config.num_local_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (128, 8, 768)
        assert config.to_dict()["num_experts"] == 128  # the name SDAR's config and lmdeploy read
    if config_cls is WeDLMConfig:
        assert config.mask_token_id == 151665 and config.qk_norm == (name == "WeDLM-8B")


TINY = dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, vocab_size=256, num_experts=4, num_experts_per_tok=2,
            max_window_layers=2, mask_token_id=255, pad_token_id=0)


def _tiny_from_hub(name: str, out: Path) -> Path:
    """A random model whose config.json is the hub one with tiny sizes (every other key kept)."""
    config = json.loads((HUB / name / "config.json").read_text())
    config.update({k: v for k, v in TINY.items() if k in config or k == "mask_token_id"})
    config.pop("layer_types", None)
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out)).save_pretrained(out)
    (out / "config.json").write_text(json.dumps(config))  # keep the hub file's keys (auto_map included)
    return out


@pytest.mark.parametrize(("name", "model_cls"), [("SDAR-8B-Chat", "SDARForCausalLM"),
                                                 ("SDAR-30B-A3B-Chat", "SDARMoeForCausalLM"),
                                                 ("WeDLM-8B", "WeDLMForCausalLM"), ("WeDLM-7B", "WeDLMForCausalLM")])
def test_tiny_models_with_hub_configs_load_as_their_class(name, model_cls, tmp_path):
    path = _tiny_from_hub(name, tmp_path / name)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == model_cls
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.isfinite(model(ids).logits).all()
    if model_cls == "SDARMoeForCausalLM":  # hub tensor layout: one tensor per expert
        from safetensors import safe_open
        with safe_open(str(path / "model.safetensors"), "pt") as f:
            names = set(f.keys())
        assert {"model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.1.mlp.gate.weight"} <= names


def _relabel(src: Path, dst: Path, **fields) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **fields}))
    return dst


@pytest.mark.parametrize("variant", ["qwen3", "qwen2.5"])
def test_wedlm_modeling_is_qwen3_or_qwen2_with_the_same_tensors(variant, tmp_path):
    """WeDLM's hf_compat modeling = Qwen3 (qk_norm) or Qwen2.5 (q/k/v bias, no qk norm): same logits."""
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    torch.manual_seed(0)
    ref = (Qwen3ForCausalLM(Qwen3Config(head_dim=8, **shape)) if variant == "qwen3"
           else Qwen2ForCausalLM(Qwen2Config(**shape)))
    with torch.no_grad():
        for p in ref.parameters():
            if p.dim() == 1:
                p.normal_()  # norms and biases away from their init, so a missing one shows
    ref.save_pretrained(tmp_path / "ref")
    switches = dict(qk_norm=True, attention_bias=False) if variant == "qwen3" else dict(qk_norm=False,
                                                                                       attention_bias=True)
    path = _relabel(tmp_path / "ref", tmp_path / "wedlm", model_type="wedlm", architectures=["WeDLMForCausalLM"],
                    head_dim=8, mask_token_id=63, **switches)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "WeDLMForCausalLM"
    ids = torch.tensor([[1, 5, 9, 3, 2, 7]])
    assert torch.allclose(model(ids).logits, ref(ids).logits, atol=1e-5)
    as_autoregressive(model)  # trained with the AR objective: saved as the plain architecture
    assert model.config.model_type == ("qwen3" if variant == "qwen3" else "qwen2")


def test_hub_like_sdar_checkpoint_loads_with_filled_in_fields(tiny_sdar_dir, tmp_path):
    """A tiny SDAR checkpoint laid out like the hub ones: no block_size / mask_token_id, an auto_map."""
    config = json.loads((tiny_sdar_dir / "config.json").read_text())
    hub_like = {k: v for k, v in config.items() if k not in ("block_size", "mask_token_id")}
    hub_like["auto_map"] = json.loads((HUB / "SDAR-8B-Chat" / "config.json").read_text())["auto_map"]
    path = shutil.copytree(tiny_sdar_dir, tmp_path / "SDAR-tiny-Chat-b8")
    (path / "config.json").write_text(json.dumps(hub_like))
    loaded = load_model(path, device="cpu", dtype="float32")
    mask = loaded.tokenizer.convert_tokens_to_ids("<|MASK|>")
    assert (loaded.spec.family, loaded.spec.block_size, loaded.spec.mask_token_id) == ("sdar", 8, mask)
    assert (loaded.model.config.block_size, loaded.model.config.mask_token_id) == (8, mask)
    trainer_model, _, objective = prepare_model(SFTConfig(model_name_or_path=str(path), train_file="t.jsonl",
                                                          objective="sdar", block_length=8), "sdpa")
    assert (trainer_model.config.block_size, trainer_model.config.mask_token_id, objective.mask_token_id) == \
        (8, mask, mask)                                   # the trainer's way: the same values
    loaded.model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert (saved["block_size"], saved["mask_token_id"]) == (8, mask) and "auto_map" not in saved


def test_hub_like_wedlm_checkpoint_loads_as_wedlm(tiny_ar_dir, tmp_path):
    path = _relabel(tiny_ar_dir, tmp_path / "wedlm", model_type="wedlm", architectures=["WeDLMForCausalLM"],
                    qk_norm=True, attention_bias=False, mask_token_id=3)
    loaded = load_model(path, device="cpu", dtype="float32")
    plain = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    assert (loaded.spec.family, type(loaded.model).__name__) == ("wedlm", "WeDLMForCausalLM")
    ids = torch.tensor([[5, 17, 42, 9]])
    assert torch.allclose(loaded.model(ids).logits, plain.model(ids).logits, atol=1e-6)
    eos = loaded.tokenizer.convert_tokens_to_ids(loaded.tokenizer.eos_token)
    assert eos in loaded.spec.stop_ids
