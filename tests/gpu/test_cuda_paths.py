"""CUDA-only paths: flex attention training loss and GPU decoding (run with `pytest -m gpu`)."""

import pytest
import torch

from tests.generation.lmdeploy_reference import lmdeploy_reference, untie_head
from tests.generation.sdar_reference import reference_generate
from tests.generation.wedlm_upstream import port_for, sharpen_head
from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import load_model
from textwm.training.objectives import SDARObjective, WeDLMObjective

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _batch(objective, pad):
    rows = [{"input_ids": list(range(20, 120)) + [pad] * 4, "labels": [-100] * 60 + list(range(80, 120)) + [pad] * 4,
             "position_ids": list(range(104)), "sample_ids": [0] * 104, "noise_seeds": [5]},
            {"input_ids": list(range(30, 90)), "labels": [-100] * 20 + list(range(50, 90)),
             "position_ids": list(range(30)) + list(range(30)), "sample_ids": [0] * 30 + [1] * 30,
             "noise_seeds": [6, 7]}]
    return {k: v.cuda() for k, v in objective.collate(rows).items()}


def test_flex_attention_loss_equals_dense_sdpa_loss(tiny_sdar_dir):
    lm = load_model(tiny_sdar_dir, device="cuda", dtype="float32", attn_implementation="flex_attention")
    dense = load_model(tiny_sdar_dir, device="cuda", dtype="float32", attn_implementation="sdpa")
    pad, mask_id = lm.tokenizer.pad_token_id, lm.spec.mask_token_id
    flex_obj = SDARObjective(attn_implementation="flex_attention", pad_token_id=pad, mask_token_id=mask_id, block_size=8)
    sdpa_obj = SDARObjective(attn_implementation="sdpa", pad_token_id=pad, mask_token_id=mask_id, block_size=8)
    batch = _batch(flex_obj, pad)
    loss_flex = flex_obj.loss(lm.model, batch)
    loss_flex.backward()
    loss_sdpa = sdpa_obj.loss(dense.model, batch)  # same 128-padded batch: padding is masked either way
    assert loss_flex.item() == pytest.approx(loss_sdpa.item(), rel=1e-4)


def test_gpu_decoding_equals_the_reference(tiny_sdar_dir):
    lm = load_model(tiny_sdar_dir, device="cuda", dtype="float32")
    prompts = [[11, 12, 13, 14, 15], list(range(20, 37)), [40, 41, 42]]
    for strategy in ("low_confidence_dynamic", "entropy_bounded"):
        settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=2,
                                  remasking_strategy=strategy, confidence_threshold=0.05)
        got = SDARDecoder(lm.model, lm.spec).generate(prompts, settings)
        cpu = load_model(tiny_sdar_dir, device="cpu", dtype="float32")
        for p, g in zip(prompts, got):
            ref = reference_generate(cpu.model, p, mask_id=lm.spec.mask_token_id, stop_ids=lm.spec.stop_ids,
                                     settings=settings)
            assert g.token_ids == ref


def test_gpu_lmdeploy_rules_equal_the_port(tiny_sdar_dir):
    lm = untie_head(load_model(tiny_sdar_dir, device="cuda", dtype="float32"))
    cpu = untie_head(load_model(tiny_sdar_dir, device="cpu", dtype="float32"))
    prompts = [[11, 12, 13, 14, 15], list(range(20, 37)), [40, 41, 42], list(range(50, 58))]
    for block, steps, strategy in ((8, 1, "low_confidence_dynamic"), (4, 2, "low_confidence_static"),
                                   (4, 4, "sequential")):
        settings = DecodeSettings(gen_length=13, temperature=0, block_length=block, denoising_steps=steps,
                                  remasking_strategy=strategy, sdar_rules="lmdeploy")
        got = SDARDecoder(lm.model, lm.spec).generate(prompts, settings)
        for p, g in zip(prompts, got):
            ref = lmdeploy_reference(cpu.model, p, mask_id=lm.spec.mask_token_id, stop_ids=lm.spec.stop_ids,
                                     settings=settings)
            assert (g.token_ids, g.finish_reason, g.num_forwards) == ref


def test_wedlm_flex_attention_loss_equals_dense_sdpa_loss(tiny_wedlm_dir):
    lm = load_model(tiny_wedlm_dir, device="cuda", dtype="float32", attn_implementation="flex_attention")
    dense = load_model(tiny_wedlm_dir, device="cuda", dtype="float32", attn_implementation="sdpa")
    pad, mask_id = lm.tokenizer.pad_token_id, lm.spec.mask_token_id
    flex_obj = WeDLMObjective(attn_implementation="flex_attention", pad_token_id=pad, mask_token_id=mask_id,
                              noise_block=8)
    sdpa_obj = WeDLMObjective(attn_implementation="sdpa", pad_token_id=pad, mask_token_id=mask_id, noise_block=8)
    batch = _batch(flex_obj, pad)
    loss_flex = flex_obj.loss(lm.model, batch)
    loss_flex.backward()
    assert loss_flex.item() == pytest.approx(sdpa_obj.loss(dense.model, batch).item(), rel=1e-4)


def test_wedlm_gpu_decoding_equals_the_upstream_port(tiny_wedlm_dir):
    lm = sharpen_head(load_model(tiny_wedlm_dir, device="cuda", dtype="float32"))
    cpu = sharpen_head(load_model(tiny_wedlm_dir, device="cpu", dtype="float32"))
    prompts = [[11, 12, 13, 14, 15], list(range(20, 37)), [40, 41, 42]]
    for window, threshold, penalty in ((4, 0.4, 0.02), (16, 100.0, 0.0), (8, 5.0, 0.1)):
        settings = DecodeSettings(gen_length=12, temperature=0, window_size=window, entropy_threshold=threshold,
                                  position_penalty=penalty)
        got = WeDLMDecoder(lm.model, lm.spec).generate(prompts, settings)
        for p, g in zip(prompts, got):
            tokens, finish, _ = port_for(cpu.model, p, mask_id=lm.spec.mask_token_id, stop_ids=lm.spec.stop_ids,
                                         settings=settings)
            assert (g.token_ids, g.finish_reason) == (tokens, finish)
