"""The trainer with the SDAR objective on a tiny SDAR-MoE (Qwen3-MoE) checkpoint, and from a hub-like SDAR one."""

import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import TINY_CORPUS, chat, write_lines
from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model, read_spec
from textwm.models.tiny import build_tiny_checkpoint
from textwm.training.config import SFTConfig
from textwm.training.trainer import train


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_sdar_moe"), TINY_CORPUS, family="sdar_moe",
                                 block_size=8, vocab_size=400, seed=4)


def _train(start, tmp_path):
    rooms = ["kitchen", "hallway", "bedroom"]
    data = write_lines(tmp_path / "train.jsonl", [chat(user=f"State: in the {a}.\n\nAction: go to {b}",
                                                        answer=f"You move to the {b}.") for a in rooms for b in rooms])
    return train(SFTConfig(model_name_or_path=str(start), train_file=str(data), output_dir=str(tmp_path / "out"),
                           objective="sdar", block_length=8, cutoff_len=256, learning_rate=1e-2,
                           per_device_train_batch_size=2, max_steps=2, logging_steps=1, save_steps=1000,
                           warmup_ratio=0.0, lr_scheduler_type="constant"))


def test_sdar_objective_trains_an_moe_checkpoint(moe_dir, tmp_path):
    out = tmp_path / "out"
    result = _train(moe_dir, tmp_path)
    assert result.global_step == 2 and math.isfinite(result.train_loss) and result.train_loss > 0
    before, after = load_file(str(moe_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert before.keys() == after.keys()  # saved in the hub layout (one tensor per expert)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert "model.layers.0.mlp.gate.weight" in changed  # the router learns
    assert any(".mlp.experts." in k for k in changed) and "model.embed_tokens.weight" in changed
    spec = read_spec(out)
    assert (spec.family, spec.model_type, spec.block_size) == ("sdar", "sdar_moe", 8)
    trained = load_model(out, device="cpu", dtype="float32")
    settings = DecodeSettings(gen_length=8, temperature=0, block_length=8, denoising_steps=4)
    [generation] = SDARDecoder(trained.model, trained.spec).generate([[11, 12, 13]], settings)
    assert generation.token_ids and spec.mask_token_id not in generation.token_ids


def test_training_starts_from_a_hub_like_sdar_checkpoint(tiny_sdar_dir, tmp_path):
    """config.json without block_size / mask_token_id (as on the hub): the values come from the rules
    (the -b8 name, the tokenizer's <|MASK|>) and the saved checkpoint carries them."""
    start = shutil.copytree(tiny_sdar_dir, tmp_path / "SDAR-tiny-Chat-b8")
    config = json.loads((start / "config.json").read_text())
    (start / "config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                   if k not in ("block_size", "mask_token_id")}))
    result = _train(start, tmp_path)
    assert result.global_step == 2 and math.isfinite(result.train_loss)
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["block_size"], saved["mask_token_id"]) == (8, config["mask_token_id"])
