"""SDAR-MoE (SDAR-30B-A3B's architecture) end to end on a tiny random Qwen3-MoE: load, decode, save, reload.

The decoders hand the model a custom KV cache object and boolean 4-D masks; MoE routing is per
token, so the cached, batched decoder must still equal the slow uncached reference token for token.
"""

import json
import random

import pytest
import torch
from safetensors import safe_open

from tests.conftest import TINY_CORPUS
from tests.generation.sdar_reference import reference_generate
from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import as_autoregressive, convert_to_block_diffusion, load_model, read_spec
from textwm.models.tiny import TINY_MOE, build_tiny_checkpoint


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_sdar_moe"), TINY_CORPUS, family="sdar_moe",
                                 block_size=8, vocab_size=400, seed=3)


@pytest.fixture(scope="module")
def moe(moe_dir):
    return load_model(moe_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(moe):
    rng = random.Random(1)
    return [[rng.randrange(10, len(moe.tokenizer)) for _ in range(n)] for n in (5, 11, 3)]


def test_tiny_moe_checkpoint_is_sdar_moe_in_the_hub_layout(moe_dir, moe):
    config = json.loads((moe_dir / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("sdar_moe", ["SDARMoeForCausalLM"])
    assert config["num_experts"] == TINY_MOE["num_experts"]
    spec = read_spec(moe_dir)
    assert (spec.family, spec.model_type, spec.block_size) == ("sdar", "sdar_moe", 8)
    assert spec.mask_token_id == moe.tokenizer.convert_tokens_to_ids("<|MASK|>")
    assert type(moe.model).__name__ == "SDARMoeForCausalLM"
    with safe_open(str(moe_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.mlp.experts.3.gate_proj.weight" in names and "model.layers.0.mlp.gate.weight" in names


@pytest.mark.parametrize(("block", "steps", "strategy"), [(4, 2, "low_confidence_dynamic"), (2, 1, "entropy_bounded"),
                                                          (8, 8, "sequential"), (4, 4, "low_confidence_static")])
def test_moe_cached_batched_decoding_equals_reference(moe, prompts, block, steps, strategy):
    settings = DecodeSettings(gen_length=8, temperature=0, block_length=block, denoising_steps=steps,
                              remasking_strategy=strategy, confidence_threshold=0.05, entropy_budget=1.5)
    got = SDARDecoder(moe.model, moe.spec).generate(prompts, settings)
    for p, g in zip(prompts, got):
        assert g.token_ids == reference_generate(moe.model, p, mask_id=moe.spec.mask_token_id,
                                                 stop_ids=moe.spec.stop_ids, settings=settings)
        assert moe.spec.mask_token_id not in g.token_ids
    assert len({t for g in got for t in g.token_ids}) > 3  # not one repeated token: the parity means something


def test_moe_save_and_reload_give_the_same_outputs(moe, prompts, tmp_path):
    moe.model.save_pretrained(tmp_path / "re")
    moe.tokenizer.save_pretrained(tmp_path / "re")
    again = load_model(tmp_path / "re", device="cpu", dtype="float32")
    ids = torch.tensor([prompts[1]])
    assert torch.equal(moe.model(ids).logits, again.model(ids).logits)
    settings = DecodeSettings(gen_length=9, temperature=0, block_length=4, denoising_steps=2)
    assert ([g.token_ids for g in SDARDecoder(moe.model, moe.spec).generate(prompts, settings)]
            == [g.token_ids for g in SDARDecoder(again.model, again.spec).generate(prompts, settings)])


def test_qwen3_moe_converts_to_sdar_moe_and_back(moe_dir, tmp_path):
    """An AR Qwen3-MoE becomes SDAR-MoE for the sdar objective, and an SDAR-MoE a Qwen3-MoE for the AR one."""
    loaded = load_model(moe_dir, device="cpu", dtype="float32")
    ids = torch.tensor([[5, 17, 42, 9]])
    before = loaded.model(ids).logits
    as_autoregressive(loaded.model)
    assert (type(loaded.model).__name__, loaded.model.config.model_type) == ("Qwen3MoeForCausalLM", "qwen3_moe")
    assert torch.equal(loaded.model(ids).logits, before)
    convert_to_block_diffusion(loaded.model, loaded.tokenizer, block_size=4)
    assert (type(loaded.model).__name__, loaded.model.config.block_size) == ("SDARMoeForCausalLM", 4)
    loaded.model.save_pretrained(tmp_path / "back")
    loaded.tokenizer.save_pretrained(tmp_path / "back")
    assert read_spec(tmp_path / "back").model_type == "sdar_moe"
    assert torch.equal(load_model(tmp_path / "back", device="cpu", dtype="float32").model(ids).logits, before)


gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("dtype", [pytest.param("float32", marks=gpu), pytest.param("bfloat16", marks=gpu)])
def test_moe_on_gpu_flex_attention_training_loss_and_cached_decoding(moe_dir, prompts, dtype):
    """CUDA paths with the MoE: flex-attention SDAR loss (and its backward) equals dense SDPA, and the
    cached, batched decoder equals the reference on the GPU."""
    from textwm.training.objectives import SDARObjective

    flex = load_model(moe_dir, device="cuda", dtype=dtype, attn_implementation="flex_attention")
    dense = load_model(moe_dir, device="cuda", dtype=dtype, attn_implementation="sdpa")
    pad, mask_id = flex.tokenizer.pad_token_id, flex.spec.mask_token_id
    rows = [{"input_ids": list(range(20, 120)) + [pad] * 4, "labels": [-100] * 60 + list(range(80, 120)) + [pad] * 4,
             "position_ids": list(range(104)), "sample_ids": [0] * 104, "noise_seeds": [5]}]
    objectives = [SDARObjective(attn_implementation=a, pad_token_id=pad, mask_token_id=mask_id, block_size=8)
                  for a in ("flex_attention", "sdpa")]
    batch = {k: v.cuda() for k, v in objectives[0].collate(rows).items()}
    loss_flex = objectives[0].loss(flex.model, batch)
    loss_flex.backward()
    assert flex.model.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0  # the router gets a gradient
    tol = 1e-4 if dtype == "float32" else 2e-2
    assert loss_flex.item() == pytest.approx(objectives[1].loss(dense.model, batch).item(), rel=tol)
    if dtype == "float32":
        settings = DecodeSettings(gen_length=8, temperature=0, block_length=4, denoising_steps=2)
        got = SDARDecoder(dense.model, dense.spec).generate(prompts, settings)
        cpu = load_model(moe_dir, device="cpu", dtype="float32")  # the reference builds CPU tensors
        for p, g in zip(prompts, got):
            assert g.token_ids == reference_generate(cpu.model, p, mask_id=mask_id, stop_ids=cpu.spec.stop_ids,
                                                     settings=settings)
