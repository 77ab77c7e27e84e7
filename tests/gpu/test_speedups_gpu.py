"""GPU-only switches (run with `pytest -m gpu`): liger-kernel, compiled layers under flex attention and
bf16 autocast, and the 8-bit optimizer, each against the plain path's loss on a tiny SDAR model."""

import pytest
import torch

from tests.training.test_loss_impl import ROWS
from textwm.models.checkpoint import load_model
from textwm.training import speedups
from textwm.training.config import SFTConfig
from textwm.training.objectives import SDARObjective

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _loss(tiny_sdar_dir, **keys):
    torch._dynamo.reset()
    lm = load_model(tiny_sdar_dir, device="cuda", dtype="float32", attn_implementation="flex_attention")
    config = SFTConfig(model_name_or_path="m", train_file="t", bf16=True, **keys)
    speedups.check_packages(config)
    speedups.apply_config(lm.model, config)
    objective = SDARObjective(attn_implementation="flex_attention", pad_token_id=lm.tokenizer.pad_token_id,
                              mask_token_id=lm.spec.mask_token_id, block_size=4, loss_impl=config.loss_impl)
    batch = {k: v.cuda() for k, v in objective.collate(ROWS).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = objective.loss(lm.model, batch)
    loss.backward()
    return float(loss), lm.model


@pytest.mark.parametrize("keys", [{"torch_compile": True}, {"torch_compile": True, "gradient_checkpointing": True},
                                  {"loss_impl": "chunked", "torch_compile": True}])
def test_compiled_layers_keep_the_loss(tiny_sdar_dir, keys):
    assert _loss(tiny_sdar_dir, **keys)[0] == pytest.approx(_loss(tiny_sdar_dir)[0], rel=2e-2)


def test_liger_kernels_keep_the_loss(tiny_sdar_dir):
    pytest.importorskip("liger_kernel")
    assert _loss(tiny_sdar_dir, enable_liger_kernel=True)[0] == pytest.approx(_loss(tiny_sdar_dir)[0], rel=2e-2)


def test_the_8bit_optimizer_takes_a_step(tiny_sdar_dir):
    bnb = pytest.importorskip("bitsandbytes")
    _, model = _loss(tiny_sdar_dir, optim="adamw_bnb_8bit")
    before = [p.detach().clone() for p in model.parameters()]
    bnb.optim.AdamW8bit(model.parameters(), lr=1e-3).step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
