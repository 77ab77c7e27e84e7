"""The engine's fused layers compute what the checkpoint's modules compute (CPU, uncompiled and compiled)."""

import pytest
import torch

from tests.conftest import TINY_CORPUS
from textwm.generation.engine.fused_layers import FusedLayers, ModuleLayers, NotFusable, check_fusable
from textwm.generation.engine.static_model import StaticModel
from textwm.models.tiny import build_tiny_model, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TINY_CORPUS, vocab_size=300, with_mask_token=True)


def _model(tokenizer, family="sdar", seed=0, dtype=torch.float64, arch="qwen3"):
    model = build_tiny_model(tokenizer, family=family, seed=seed, arch=arch).to(dtype).eval()
    for p in model.parameters():   # non-trivial norm weights, so that a missing norm shows
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    return model


def _shape(model):
    c = model.config
    return dict(n_heads=c.num_attention_heads, n_kv=c.num_key_value_heads, head_dim=c.head_dim)


def _run(math, model, h, cos, sin):
    """q, k, v and the outputs of every layer of ``math`` over ``h [B, Q, hidden]`` (attention output = q)."""
    outs, x = [], math.input_norm(h)
    for i in range(len(model.model.layers)):
        q, k, v = math.qkv_of(i, x, cos, sin)
        h, x = math.finish(i, h, q.flatten(2))
        outs += [q, k, v, h, x]
    return outs


@pytest.mark.parametrize("arch", ["qwen3", "llama"])     # Llama: no q_norm/k_norm attributes at all
@pytest.mark.parametrize("family", ["sdar", "ar", "wedlm"])
def test_fused_layers_equal_the_modules(tokenizer, family, arch):
    model = _model(tokenizer, family, arch=arch)
    shape = _shape(model)
    before = {n: p.clone() for n, p in model.named_parameters()}
    fused = FusedLayers(model, compiled=False, **shape)
    for n, p in model.named_parameters():   # the weights are views of the fused tensors, values unchanged
        assert torch.equal(p, before[n]), n
    h = torch.randn(3, 5, model.config.hidden_size, dtype=torch.float64)
    cos, sin = model.model.rotary_emb(h, torch.arange(5)[None].expand(3, -1) + 7)
    for got, want in zip(_run(fused, model, h, cos, sin), _run(ModuleLayers(model, **shape), model, h, cos, sin)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_fusing_shares_storage_and_a_second_fusion_reuses_it(tokenizer):
    model = _model(tokenizer)
    attn = model.model.layers[0].self_attn
    fused = FusedLayers(model, compiled=False, **_shape(model))
    weight = fused.qkv[0][0]
    assert attn.q_proj.weight.data_ptr() == weight.data_ptr()
    assert attn.k_proj.weight.data_ptr() == weight[attn.q_proj.weight.shape[0]:].data_ptr()
    again = FusedLayers(model, compiled=False, **_shape(model))
    assert again.qkv[0][0] is weight                       # no second copy of the weights
    with torch.no_grad():                                  # a weight loaded in place reaches the fused tensor
        attn.k_proj.weight.copy_(torch.zeros_like(attn.k_proj.weight))
    assert not weight[attn.q_proj.weight.shape[0]:][:attn.k_proj.weight.shape[0]].any()
    model.float()   # replaced parameters (float64 -> float32): the next fusion copies afresh
    assert FusedLayers(model, compiled=False, **_shape(model)).qkv[0][0] is not weight


def test_experts_are_not_fusable_and_the_engine_runs_their_modules(tokenizer):
    model = _model(tokenizer, "sdar_moe")
    with pytest.raises(NotFusable, match="layer 0: the MLP"):
        check_fusable(model)
    with pytest.raises(NotFusable):
        StaticModel(model, rows=1, capacity=8, fused=True)
    assert isinstance(StaticModel(model, rows=1, capacity=8).layer_math, ModuleLayers)


def test_another_activation_is_not_fusable(tokenizer):
    model = _model(tokenizer)
    model.config.hidden_act = "gelu"
    with pytest.raises(NotFusable, match="hidden_act 'gelu'"):
        check_fusable(model)


def _forward(net, b=2, nq=3, kv_len=12):
    ids = torch.arange(b * nq).view(b, nq) + 5
    positions = torch.arange(nq)[None].expand(b, -1) + 4
    limits = positions + 1
    return net.forward(ids, positions, positions.clone(), limits, kv_len=kv_len)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_the_static_forward_is_the_same_fused_or_not(tokenizer, arch):
    model = _model(tokenizer, arch=arch)
    plain = StaticModel(model, rows=2, capacity=16, fused=False)
    fused = StaticModel(model, rows=2, capacity=16, fused=True)
    assert isinstance(fused.layer_math, FusedLayers)
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]
    slots = torch.tensor([0, 1])
    torch.testing.assert_close(fused.prefill(slots, prompts, block=2), plain.prefill(slots, prompts, block=2),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_forward(fused), _forward(plain), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_compiled_fused_layers_equal_the_modules(tokenizer):
    """Inductor's kernels (C++ on CPU) for float32, with two token counts so the dynamic graph is reused."""
    model = _model(tokenizer, dtype=torch.float32)
    shape = _shape(model)
    fused = FusedLayers(model, compiled=True, **shape)
    for b, nq in ((2, 3), (4, 1)):
        h = torch.randn(b, nq, model.config.hidden_size)
        cos, sin = model.model.rotary_emb(h, torch.arange(nq)[None].expand(b, -1))
        for got, want in zip(_run(fused, model, h, cos, sin), _run(ModuleLayers(model, **shape), model, h, cos, sin)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
