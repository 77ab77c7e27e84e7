"""The decode engine on CUDA: its CUDA-graph forwards give the reference decoders' greedy output, token for
token, for every family and both SDAR rule sets, with rows refilling and joining, on Qwen3 and Llama
checkpoints (run with `pytest -m gpu`).

float64 models, so that the graphed engine and the reference agree far inside any threshold's margin."""

import dataclasses
import random

import pytest
import torch

from tests.generation.lmdeploy_reference import untie_head
from tests.generation.wedlm_upstream import sharpen_head
from textwm.generation.decoders import make_decoder, reference_decoder
from textwm.generation.engine import DecodeEngine
from textwm.generation.engine.decoder import EngineDecoder
from textwm.generation.engine.fused_layers import FusedLayers, ModuleLayers
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.remasking import STRATEGIES
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

LENGTHS = [11, 4, 13, 1, 9, 20, 7, 16]


def _load(path, head=None):
    lm = load_model(path, device="cuda", dtype="float32")
    if head is not None:
        lm = head(lm)
    lm.model.double()
    return lm


def _prompts(lm):
    rng = random.Random(0)
    return [[rng.randrange(10, len(lm.tokenizer)) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8, 16, 1)]


def _check(lm, settings, attention="sdpa", fused=None):
    prompts = _prompts(lm)
    ref = reference_decoder(lm.model, lm.spec).generate(prompts, settings, LENGTHS)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=64, attention=attention, fused=fused)
    assert engine.forward.enabled
    got = engine.generate(prompts, settings, LENGTHS)
    assert [(g.token_ids, g.finish_reason) for g in got] == [(g.token_ids, g.finish_reason) for g in ref]
    assert engine.forward.num_graphs > 0
    return engine


@pytest.mark.parametrize("attention", ["sdpa", "grouped"])
def test_sdar_engine_with_cuda_graphs_equals_the_reference(tiny_sdar_dir, attention):
    lm = _load(tiny_sdar_dir, untie_head)
    for strategy in STRATEGIES:
        for block, steps in ((4, 1), (4, 4), (8, 3)):
            _check(lm, DecodeSettings(gen_length=12, temperature=0, block_length=block, denoising_steps=steps,
                                      remasking_strategy=strategy, confidence_threshold=0.3), attention)
    for block, steps, strategy in ((8, 1, "low_confidence_dynamic"), (4, 2, "low_confidence_static"),
                                   (4, 4, "sequential")):
        _check(lm, DecodeSettings(gen_length=12, temperature=0, sdar_rules="lmdeploy", block_length=block,
                                  denoising_steps=steps, remasking_strategy=strategy), attention)


@pytest.mark.parametrize("attention", ["sdpa", "grouped"])
def test_wedlm_and_ar_engines_with_cuda_graphs_equal_the_reference(tiny_wedlm_dir, tiny_ar_dir, attention):
    wedlm = _load(tiny_wedlm_dir, sharpen_head)
    for window, threshold, penalty in ((4, 0.4, 0.02), (16, 4.6, 0.0), (8, 100.0, 0.0)):
        _check(wedlm, DecodeSettings(gen_length=12, temperature=0, window_size=window, entropy_threshold=threshold,
                                     position_penalty=penalty), attention)
    ar = _load(tiny_ar_dir)
    settings = DecodeSettings(gen_length=12, temperature=0)
    _check(ar, settings, attention)
    _check(ar, dataclasses.replace(settings, repetition_penalty=1.5), attention)


@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_after_the_warm_up_of_every_shape_no_request_captures_a_graph(family, tiny_sdar_dir, tiny_wedlm_dir,
                                                                       tiny_ar_dir):
    """The server's warm-up captures every row bucket's and kv bucket's graph: decoding then captures none, and
    its greedy output is still the reference decoder's."""
    lm = _load({"sdar": tiny_sdar_dir, "wedlm": tiny_wedlm_dir, "ar": tiny_ar_dir}[family],
               {"sdar": untie_head, "wedlm": sharpen_head}.get(family))
    settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2, window_size=8)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=600)
    engine.warm_up(settings)
    warmed = engine.num_graphs
    assert warmed > 0 and engine.stats.warm_up_s > 0
    prompts = _prompts(lm)
    long = [p * (300 // len(p)) for p in prompts[:2]]       # into the second and third kv buckets
    ref = reference_decoder(lm.model, lm.spec).generate(prompts + long, settings)
    got = engine.generate(prompts + long, settings)
    assert [(g.token_ids, g.finish_reason) for g in got] == [(g.token_ids, g.finish_reason) for g in ref]
    assert engine.num_graphs == warmed


@pytest.mark.parametrize("attention", ["sdpa", "grouped"])
def test_llama_engines_with_cuda_graphs_equal_the_reference(tiny_llama_dirs, attention):
    """Llama layers (no q/k norm modules at all) through the compiled fused layers, for every family."""
    engine = _check(_load(tiny_llama_dirs["ar"]), DecodeSettings(gen_length=12, temperature=0), attention)
    assert isinstance(engine.net.layer_math, FusedLayers)
    sdar = _load(tiny_llama_dirs["sdar"], untie_head)
    for strategy in STRATEGIES:
        _check(sdar, DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2,
                                    remasking_strategy=strategy, confidence_threshold=0.3), attention)
    _check(sdar, DecodeSettings(gen_length=12, temperature=0, sdar_rules="lmdeploy", block_length=8, denoising_steps=1),
           attention)
    _check(_load(tiny_llama_dirs["wedlm"], sharpen_head),
           DecodeSettings(gen_length=12, temperature=0, window_size=8, entropy_threshold=4.6), attention)


@pytest.mark.parametrize("drafter", ["sdar", "wedlm"])
def test_the_engine_hybrid_with_cuda_graphs_equals_the_reference_hybrid(tiny_llama_dirs, drafter):
    """Warmed up (every round shape captured first), the engine hybrid's answers and rounds are the reference
    hybrid's, and no round captures a graph."""
    from textwm.generation.engine.speculative import EngineSpeculativeDecoder
    from textwm.generation.speculative import SpeculativeDecoder

    ar, draft = _load(tiny_llama_dirs["ar"]), _load(tiny_llama_dirs[drafter])
    settings = DecodeSettings(gen_length=20, temperature=0, block_length=4, denoising_steps=2)
    prompts = _prompts(ar)
    want = SpeculativeDecoder(ar, draft, draft_length=4).generate(prompts, settings)
    engine = EngineSpeculativeDecoder(ar, draft, draft_length=4, max_len=128)
    engine.warm_up(settings)
    captured = engine.forward.num_graphs
    got = engine.generate(prompts, settings)
    assert [(g.token_ids, g.num_forwards) for g in got] == [(w.token_ids, w.num_forwards) for w in want]
    assert engine.forward.num_graphs == captured > 0


def test_the_engine_through_the_checkpoints_modules_equals_the_reference(tiny_sdar_dir, tiny_wedlm_dir):
    """The unfused layer path (MoE checkpoints take it) with CUDA graphs."""
    lm = _load(tiny_sdar_dir, untie_head)
    engine = _check(lm, DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2), fused=False)
    assert isinstance(engine.net.layer_math, ModuleLayers)
    _check(_load(tiny_wedlm_dir, sharpen_head), DecodeSettings(gen_length=12, temperature=0, window_size=8),
           fused=False)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_compiled_fused_layers_track_the_modules_in_low_precision(request, arch, dtype):
    """Inductor's kernels keep eager's roundings: the fused forward's logits stay within a few bf16 ulps of
    the modules' (float64 tests cannot see a dropped cast), and the argmax agrees nearly everywhere."""
    path = request.getfixturevalue("tiny_sdar_dir") if arch == "qwen3" else \
        request.getfixturevalue("tiny_llama_dirs")["sdar"]
    lm = load_model(path, device="cuda", dtype="float32")
    model = lm.model.to(dtype)
    fused = StaticModel(model, rows=4, capacity=64, fused=True)
    plain = StaticModel(model, rows=4, capacity=64, fused=False)
    assert isinstance(fused.layer_math, FusedLayers)
    prompts = _prompts(lm)[:4]
    slots = torch.arange(4, device="cuda")
    a, b = fused.prefill(slots, prompts, block=4).float(), plain.prefill(slots, prompts, block=4).float()
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    ids = torch.randint(10, len(lm.tokenizer), (4, 4), device="cuda")
    pos = torch.tensor([len(p) for p in prompts], device="cuda")[:, None] + torch.arange(4, device="cuda")
    limits = (pos // 4 + 1) * 4
    a = fused.forward(ids, pos, pos, limits, kv_len=64).float()
    b = plain.forward(ids, pos, pos, limits, kv_len=64).float()
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9


def test_make_decoder_runs_the_engine_on_cuda(tiny_sdar_dir):
    lm = _load(tiny_sdar_dir, untie_head)
    assert isinstance(make_decoder(lm.model, lm.spec), EngineDecoder)


def test_the_engine_runs_its_steps_under_cublaslt_and_restores_the_process_preference(tiny_ar_dir):
    lm = _load(tiny_ar_dir)
    seen = []

    class Recording(DecodeEngine):
        def _step(self):
            seen.append(torch.backends.cuda.preferred_blas_library())
            return super()._step()

    before = torch.backends.cuda.preferred_blas_library()
    engine = Recording(lm.model, lm.spec, max_rows=2, max_len=32)
    engine.generate([[5, 6, 7]], DecodeSettings(gen_length=4, temperature=0))
    assert engine.blas == "cublaslt" and seen and set(seen) == {torch._C._BlasBackend.Cublaslt}
    assert torch.backends.cuda.preferred_blas_library() == before
    assert DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32, blas="default").blas is None


@pytest.mark.parametrize("graph_tokens", [64, 256])
@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_prefill_graphs_through_sdpa_equal_the_reference(family, graph_tokens, tiny_sdar_dir, tiny_wedlm_dir,
                                                         tiny_ar_dir):
    """Bucketed prefill graphs (padding rows and widths; at 64 tokens a join takes several) over SDPA's gathered
    rows, float64: exact."""
    lm = _load({"sdar": tiny_sdar_dir, "wedlm": tiny_wedlm_dir, "ar": tiny_ar_dir}[family],
               {"sdar": untie_head, "wedlm": sharpen_head}.get(family))
    settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2, window_size=8)
    prompts = _prompts(lm)
    prompts = prompts + [prompts[6] * 2 + p for p in prompts[:3]]                 # found in the prefix cache
    ref = reference_decoder(lm.model, lm.spec).generate(prompts, settings)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=3, max_len=96, prefill_graph_tokens=graph_tokens,
                          prefix_block_tokens=8)
    got = engine.generate(prompts, settings)
    assert [(g.token_ids, g.finish_reason) for g in got] == [(g.token_ids, g.finish_reason) for g in ref]
    assert any(key[0] == "prefill" for key in engine.forward._graphs)
