"""The engine's limit-reading attention kernel equals masked SDPA, and the engine with it equals the reference
decoders (run with `pytest -m gpu`)."""

import random

import pytest
import torch
import torch.nn.functional as F

from tests.generation.lmdeploy_reference import untie_head
from tests.generation.wedlm_upstream import sharpen_head
from tests.gpu.test_engine_gpu import LENGTHS, _prompts
from textwm.generation.decoders import reference_decoder
from textwm.generation.engine import DecodeEngine
from textwm.generation.engine.limited_attention import limited_attention, supports
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SHAPES = [  # B, H, H_kv, Q, T (cache columns), D
    (3, 4, 2, 4, 70, 16),      # SDAR-like: 4 queries, 2 heads per KV head
    (2, 32, 8, 1, 1300, 128),  # AR decode on Qwen3-8B heads
    (2, 32, 8, 8, 1300, 128),  # SDAR's fused commit (2 x block 4) on Qwen3-8B heads
    (1, 16, 2, 16, 200, 64),   # G * Q = 128 query rows: two tiles
    (4, 8, 8, 3, 63, 32),      # no grouping, T under one key tile
]


def _reference(q, k, v, limits, scale):
    t = k.shape[2]
    visible = torch.arange(t, device=q.device)[None, None, None, :] < limits[:, None, :, None]
    out = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=visible, scale=scale,
                                         enable_gqa=True)
    return out.masked_fill(limits[:, None, :, None] == 0, 0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_kernel_equals_masked_attention(shape, dtype):
    b, h, h_kv, nq, t, d = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=gen)
    cache_k = torch.randn(b + 1, h_kv, t + 40, d, device="cuda", dtype=dtype, generator=gen)
    cache_v = torch.randn(b + 1, h_kv, t + 40, d, device="cuda", dtype=dtype, generator=gen)
    limits = torch.randint(1, t + 1, (b, nq), device="cuda", generator=gen)
    limits[0, 0] = 0                            # a query with nothing visible gets zeros
    top = int(limits.max())
    cache_k[:, :, top:] = float("nan")          # stale columns past every limit never leak in
    cache_v[:, :, top:] = float("nan")
    k, v = cache_k[:b, :, :t], cache_v[:b, :, :t]   # the engine's strided cache slices
    assert supports(q, d) is None
    got = limited_attention(q, k, v, limits, scale=d ** -0.5)
    want = _reference(q, k[:, :, :top], v[:, :, :top], limits, d ** -0.5)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    assert got.shape == q.shape and not got.isnan().any()
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_the_kernel_reads_the_rows_it_is_given():
    """A prefill's rows: query row b reads cache row rows[b], in place."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    b, h, h_kv, nq, t, d = 3, 16, 8, 40, 120, 64
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    cache_k = torch.randn(6, h_kv, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    cache_v = torch.randn(6, h_kv, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    rows = torch.tensor([4, 0, 2], device="cuda")
    limits = torch.randint(1, t + 1, (b, nq), device="cuda", generator=gen)
    got = limited_attention(q, cache_k, cache_v, limits, scale=d ** -0.5, rows=rows)
    want = _reference(q, cache_k[rows], cache_v[rows], limits, d ** -0.5)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def _engine_equals_reference(lm, settings, prompts=None, **engine_args):
    prompts = prompts or _prompts(lm)
    ref = reference_decoder(lm.model, lm.spec).generate(prompts, settings, LENGTHS)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=64, attention="limited", **engine_args)
    assert engine.net.attention == "limited"
    got = engine.generate(prompts, settings, LENGTHS)
    assert [(g.token_ids, g.finish_reason) for g in got] == [(g.token_ids, g.finish_reason) for g in ref]
    return engine


def test_prompts_found_in_the_prefix_cache_decode_as_the_reference(tiny_sdar_dir, tiny_ar_dir):
    """Prompts sharing 16- and 32-token starts: the later ones prefill after cached blocks, through the kernel."""
    for path, settings in ((tiny_sdar_dir, DecodeSettings(gen_length=12, temperature=0, block_length=4,
                                                          denoising_steps=2)),
                           (tiny_ar_dir, DecodeSettings(gen_length=12, temperature=0))):
        lm = load_model(path, device="cuda", dtype="float32")
        if path == tiny_sdar_dir:
            lm = untie_head(lm)
        start = _prompts(lm)[6] * 2                                       # 32 tokens
        prompts = [start[:17 + n % 8] if i % 2 else start + [11 + n] * (n % 5) for i, n in enumerate(LENGTHS)]
        engine = _engine_equals_reference(lm, settings, prompts, prefix_block_tokens=16, prefix_cache_tokens=256)
        assert engine.prompt_stats.hit_tokens > 0


def test_the_engine_with_the_kernel_equals_the_reference_in_float32(tiny_sdar_dir, tiny_wedlm_dir, tiny_ar_dir):
    """float32 (the kernel has no float64): heads sharpened so that greedy choices have wide margins."""
    sdar = untie_head(load_model(tiny_sdar_dir, device="cuda", dtype="float32"))
    for block, steps in ((4, 1), (4, 4), (8, 3)):
        _engine_equals_reference(sdar, DecodeSettings(gen_length=12, temperature=0, block_length=block,
                                                      denoising_steps=steps, confidence_threshold=0.3))
    _engine_equals_reference(sdar, DecodeSettings(gen_length=12, temperature=0, sdar_rules="lmdeploy",
                                                  block_length=4, denoising_steps=2))
    wedlm = sharpen_head(load_model(tiny_wedlm_dir, device="cuda", dtype="float32"))
    _engine_equals_reference(wedlm, DecodeSettings(gen_length=12, temperature=0, window_size=8,
                                                   entropy_threshold=100.0))
    _engine_equals_reference(load_model(tiny_ar_dir, device="cuda", dtype="float32"),
                             DecodeSettings(gen_length=12, temperature=0))


def test_auto_attention_is_the_kernel_on_cuda_and_sdpa_for_float64(tiny_ar_dir):
    lm = load_model(tiny_ar_dir, device="cuda", dtype="float32")
    assert DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32).net.attention == "limited"
    lm.model.double()
    assert DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32).net.attention == "sdpa"
    with pytest.raises(ValueError, match="attention=limited cannot run here: dtype torch.float64"):
        DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32, attention="limited")


@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_grpo_joins_through_prefill_graphs_decode_as_the_reference(family, tiny_sdar_dir, tiny_wedlm_dir,
                                                                   tiny_ar_dir):
    """A group's turns joining together (repeats, shared new blocks, cached prefixes) prefill through bucketed
    CUDA graphs captured by the warm-up: no capture while decoding, and the reference decoder's answers."""
    path = {"sdar": tiny_sdar_dir, "wedlm": tiny_wedlm_dir, "ar": tiny_ar_dir}[family]
    lm = load_model(path, device="cuda", dtype="float32")
    lm = {"sdar": untie_head, "wedlm": sharpen_head}.get(family, lambda x: x)(lm)
    settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2, window_size=8)
    start = _prompts(lm)[6] * 2                                                     # 32 tokens
    turns = [[start] * 3, [[*start, 11, 12], [*start, 11, 12], start + [13] * 20, start[:20] + [14] * 5]]
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=128, attention="limited", prefix_block_tokens=16)
    assert engine.prefill.graph_tokens > 0
    engine.warm_up(settings)
    warmed = engine.num_graphs
    decoder = reference_decoder(lm.model, lm.spec)
    for prompts in turns:
        got, ref = engine.generate(prompts, settings), decoder.generate(prompts, settings)
        assert [(g.token_ids, g.finish_reason) for g in got] == [(g.token_ids, g.finish_reason) for g in ref]
    assert engine.num_graphs == warmed and engine.prompt_stats.hit_tokens > 0


@pytest.mark.parametrize("family", ["sdar", "ar"])
def test_after_the_warm_up_eager_prefills_of_new_widths_compile_nothing(family, tiny_sdar_dir, tiny_ar_dir):
    """Joins too wide for a bucketed prefill run eagerly at their own width: after the warm-up, no width (whatever
    its divisibility by 8 or 16, one row or two, after a cached prefix or not) compiles a graph or a kernel
    variant while it waits, and the answers are the reference decoder's."""
    path = {"sdar": tiny_sdar_dir, "ar": tiny_ar_dir}[family]
    lm = load_model(path, device="cuda", dtype="float32")
    lm = {"sdar": untie_head}.get(family, lambda x: x)(lm)
    settings = DecodeSettings(gen_length=8, temperature=0, block_length=4, denoising_steps=2)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=256, attention="limited", prefix_block_tokens=16,
                          prefill_graph_tokens=32)
    engine.warm_up(settings)
    compiled = engine.num_compiles
    assert compiled >= 0, "this Triton's compiled kernel variants cannot be counted"
    rng = random.Random(1)
    decoder = reference_decoder(lm.model, lm.spec)
    for width in (80, 88, 97, 112, 131):
        a, b = ([rng.randrange(10, len(lm.tokenizer)) for _ in range(n)] for n in (width + 45, width))
        # one row whole; then two rows: ``a`` after its cached prefix (45 tokens or more left), ``b`` whole
        for prompts in ([a[:width]], [a, b]):
            got, ref = engine.generate(prompts, settings), decoder.generate(prompts, settings)
            assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    assert engine.prefill.stats.unbucketed_forwards > 0 and engine.prompt_stats.hit_tokens > 0
    assert engine.num_compiles == compiled
