"""The trainer's speed and memory switches (textwm.training.speedups): config keys, and that each one
leaves the loss and every gradient unchanged on a tiny model (CPU; liger-kernel is GPU-only)."""

import logging

import pytest
import torch

from tests.training.test_loss_impl import ROWS
from textwm.models.checkpoint import load_model
from textwm.training import speedups
from textwm.training.config import ConfigError, SFTConfig
from textwm.training.objectives import SDARObjective, WeDLMObjective
from textwm.training.trainer import check_memory


def _config(**kw):
    return SFTConfig(model_name_or_path="m", train_file="t", **kw)


@pytest.mark.parametrize(("keys", "message"), [
    ({"gradient_checkpointing_mode": "selective"}, "gradient_checkpointing_mode must be one of full, ops, got 'selective'"),
    ({"gradient_checkpointing_every": 0}, "gradient_checkpointing_every must be >= 1, got 0"),
    ({"memory_check": "strict"}, "memory_check must be one of error, warn, off, got 'strict'"),
    ({"activation_offload": True, "torch_compile": True}, "activation_offload and torch_compile cannot be combined"),
])
def test_bad_switch_values_are_refused_by_name(keys, message):
    with pytest.raises(ConfigError, match=message):
        _config(**keys)


def test_defaults_change_nothing(tiny_sdar_dir):
    lm = load_model(tiny_sdar_dir, dtype="float32")
    assert speedups.apply_config(lm.model, _config()) == ["activations: all kept (no checkpointing, no offload)"]
    assert not any(getattr(layer, "gradient_checkpointing", False) for layer in speedups.decoder_layers(lm.model))


def _objective(kind, lm):
    common = dict(attn_implementation="sdpa", pad_token_id=lm.tokenizer.pad_token_id,
                  mask_token_id=lm.spec.mask_token_id)
    if kind == "sdar":
        return SDARObjective(block_size=4, **common)
    return WeDLMObjective(noise_block=4, **common)


def _loss_and_grads(model, objective):
    model.train()
    model.zero_grad(set_to_none=True)
    loss = objective.loss(model, objective.collate(ROWS))
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


SWITCHES = {
    "full": {"gradient_checkpointing": True},
    "ops": {"gradient_checkpointing": True, "gradient_checkpointing_mode": "ops"},
    "every2": {"gradient_checkpointing": True, "gradient_checkpointing_every": 2},
    "offload": {"activation_offload": True},
    "full+offload": {"gradient_checkpointing": True, "activation_offload": True},
}


@pytest.mark.parametrize("kind", ["sdar", "wedlm"])
@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_checkpointing_and_offload_give_the_same_loss_and_gradients(kind, switch, tiny_sdar_dir, tiny_wedlm_dir):
    start = tiny_sdar_dir if kind == "sdar" else tiny_wedlm_dir
    plain = load_model(start, dtype="float32")
    want, want_grads = _loss_and_grads(plain.model, _objective(kind, plain))
    lm = load_model(start, dtype="float32")
    lines = speedups.apply_config(lm.model, _config(**SWITCHES[switch]))
    got, grads = _loss_and_grads(lm.model, _objective(kind, lm))
    assert want > 0 and len(lines) == 1
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert grads.keys() == want_grads.keys()
    for k, g in grads.items():
        torch.testing.assert_close(g, want_grads[k], rtol=1e-5, atol=1e-7, msg=k)


def test_the_log_line_says_what_was_applied_where(tiny_sdar_dir):
    layers = len(speedups.decoder_layers(load_model(tiny_sdar_dir, dtype="float32").model))
    assert layers == 2
    for keys, line in [
        (SWITCHES["every2"], "activations: checkpointing (full: recompute all but the layer input) on 1/2 decoder layers"),
        (SWITCHES["ops"], "checkpointing (ops: keep matmul/attention outputs, recompute the rest) on 2/2 decoder layers"),
        (SWITCHES["offload"], "saved activations of every decoder layer offloaded to pinned host memory"),
    ]:
        model = load_model(tiny_sdar_dir, dtype="float32").model
        assert line in speedups.apply_config(model, _config(**keys))[0]
        assert model.config.use_cache is False


def test_liger_without_a_gpu_says_so(tiny_sdar_dir, monkeypatch):
    model = load_model(tiny_sdar_dir, dtype="float32").model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(speedups.SpeedupError, match="no CUDA device is visible; set enable_liger_kernel: false"):
        speedups.apply_liger_kernels(model)


def test_missing_optional_packages_are_named_before_anything_loads(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("liger_kernel", "bitsandbytes") else real(name, *a))
    with pytest.raises(speedups.SpeedupError, match=r"enable_liger_kernel: true needs liger-kernel==0.8.5: pip install"):
        speedups.check_packages(_config(enable_liger_kernel=True))
    with pytest.raises(speedups.SpeedupError, match=r"optim: adamw_bnb_8bit needs bitsandbytes"):
        speedups.check_packages(_config(optim="adamw_bnb_8bit"))
    speedups.check_packages(_config())          # nothing optional asked for: nothing needed


def test_a_model_without_decoder_layers_is_refused():
    with pytest.raises(speedups.SpeedupError, match="Linear has no decoder layers at <model>.model.layers"):
        speedups.decoder_layers(torch.nn.Linear(2, 2))


def test_memory_check_without_cuda_is_logged_not_failed(tiny_sdar_dir, caplog):
    with caplog.at_level(logging.INFO, logger="textwm.training.trainer"):
        check_memory(load_model(tiny_sdar_dir, dtype="float32").model, _config(), rows=None, attn_implementation="sdpa")
    assert "memory check: no CUDA device, nothing to check" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sdar", "wedlm"])
def test_compiled_layers_give_the_same_loss_and_gradients(kind, tiny_sdar_dir, tiny_wedlm_dir):
    """torch.compile (inductor on the CPU here) of every decoder layer, checkpointed or not."""
    start = tiny_sdar_dir if kind == "sdar" else tiny_wedlm_dir
    plain = load_model(start, dtype="float32")
    want, want_grads = _loss_and_grads(plain.model, _objective(kind, plain))
    for keys in ({"torch_compile": True}, {"torch_compile": True, "gradient_checkpointing": True}):
        torch._dynamo.reset()
        lm = load_model(start, dtype="float32")
        assert speedups.apply_config(lm.model, _config(**keys))[-1].startswith("torch.compile: 2 decoder layers")
        got, grads = _loss_and_grads(lm.model, _objective(kind, lm))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
        for k, g in grads.items():
            torch.testing.assert_close(g, want_grads[k], rtol=1e-4, atol=1e-6, msg=k)
