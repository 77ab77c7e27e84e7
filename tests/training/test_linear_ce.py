"""linear_cross_entropy against F.cross_entropy of the materialised logits; the HF-model helper."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config, Qwen3ForCausalLM

from textwm.training.linear_ce import (
    default_chunk_size,
    linear_cross_entropy,
    model_token_cross_entropy,
    output_projection,
)


def _inputs(n, h, v, dtype, seed=0, bias=False):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    weight = torch.randn(v, h, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    b = torch.randn(v, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() if bias else None
    targets = torch.randint(v, (n,), generator=gen)
    grad_out = torch.rand(n, generator=gen, dtype=torch.float64) * 3 + 0.1      # non-uniform per-token weights
    return hidden, weight, b, targets, grad_out


def _reference(hidden, weight, bias, targets, grad_out):
    """Values and gradients through the materialised logits."""
    leaves = [t.detach().clone().requires_grad_() for t in (hidden, weight) + ((bias,) if bias is not None else ())]
    logits = F.linear(leaves[0], leaves[1], leaves[2] if bias is not None else None)
    loss = F.cross_entropy(logits.float() if logits.dtype != torch.float64 else logits, targets, reduction="none")
    loss.backward(grad_out.to(loss.dtype))
    return loss.detach(), [t.grad for t in leaves]


def _chunked(hidden, weight, bias, targets, grad_out, chunk_size):
    for t in (hidden, weight, bias):
        if t is not None:
            t.grad = None
    loss = linear_cross_entropy(hidden, weight, targets, bias=bias, chunk_size=chunk_size)
    loss.backward(grad_out.to(loss.dtype))
    return loss.detach(), [t.grad for t in (hidden, weight, bias) if t is not None]


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("chunk_size", [None, 1, 3, 7, 10, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_equal_cross_entropy_of_the_logits(dtype, tol, chunk_size, bias):
    """N = 10 rows in chunks of 1, 3 (not dividing N), 7, 10, 64 and the default; a non-uniform grad_output."""
    hidden, weight, b, targets, grad_out = _inputs(10, 6, 11, dtype, bias=bias)
    want, want_grads = _reference(hidden, weight, b, targets, grad_out)
    got, grads = _chunked(hidden, weight, b, targets, grad_out, chunk_size)
    assert got.dtype == want.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for g, w, leaf in zip(grads, want_grads, (hidden, weight, b)):
        assert g.dtype == leaf.dtype
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def test_ignored_targets_give_zero_loss_and_no_gradient():
    hidden, weight, _, targets, grad_out = _inputs(8, 5, 9, torch.float64)
    targets[[1, 6]] = -100
    want, want_grads = _reference(hidden, weight, None, targets, grad_out)
    got, grads = _chunked(hidden, weight, None, targets, grad_out, 3)
    assert got[1] == 0 and got[6] == 0 and not grads[0][[1, 6]].any()
    torch.testing.assert_close(got, want)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)


def test_no_rows():
    hidden, weight, _, targets, _ = _inputs(0, 4, 7, torch.float32)
    loss = linear_cross_entropy(hidden, weight, targets, chunk_size=3)
    assert loss.shape == (0,) and loss.requires_grad
    loss.sum().backward()
    assert hidden.grad.shape == (0, 4) and weight.grad.shape == (7, 4) and not weight.grad.any()


def test_bad_arguments_are_refused():
    hidden, weight, _, targets, _ = _inputs(4, 3, 5, torch.float32)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        linear_cross_entropy(hidden, weight, targets, chunk_size=0)
    with pytest.raises(ValueError, match="hidden must be \\[N, H\\] and weight \\[V, H\\]"):
        linear_cross_entropy(hidden, weight[:, :2], targets)
    with pytest.raises(ValueError, match="targets must be \\[N\\]"):
        linear_cross_entropy(hidden, weight, targets[:3])
    with pytest.raises(ValueError, match="bias must be \\[V\\]"):
        linear_cross_entropy(hidden, weight, targets, bias=torch.zeros(4))


def test_default_chunk_keeps_a_chunk_of_logits_near_256_mb():
    assert default_chunk_size(151936) == 441                  # 441 x 151936 float32 = 256 MB
    assert default_chunk_size(10) == 2**26 // 10


# --- on HF models ---------------------------------------------------------------------------------------------


def _tiny_lm(tie: bool, seed: int = 0) -> Qwen3ForCausalLM:
    config = Qwen3Config(vocab_size=37, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=tie)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()


def _grads(model):
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("tie", [True, False])
def test_model_helper_equals_the_logits_at_the_kept_positions(tie):
    """Values and every parameter's gradient, tied or untied embeddings; only kept positions are projected."""
    model = _tiny_lm(tie)
    ids = torch.randint(37, (2, 9), generator=torch.Generator().manual_seed(1))
    keep = torch.tensor([1, 4, 5, 8])
    select = torch.tensor([[True, False, True, True], [False, True, True, False]])
    targets = torch.tensor([3, 7, 11, 0, 36])
    weights = torch.tensor([1.0, 0.5, 2.0, 3.0, 0.25])
    logits = model(input_ids=ids, logits_to_keep=keep).logits
    want = F.cross_entropy(logits[select].float(), targets, reduction="none")
    (want * weights).sum().backward()
    want_grads = _grads(model)
    model.zero_grad(set_to_none=True)
    got = model_token_cross_entropy(model, keep=keep, select=select, targets=targets, chunk_size=2, input_ids=ids)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grads = _grads(model)
    assert grads.keys() == want_grads.keys() and ("lm_head.weight" in grads) == (not tie)
    for k in grads:
        torch.testing.assert_close(grads[k], want_grads[k], rtol=1e-4, atol=1e-6, msg=k)
    assert "forward" not in model.lm_head.__dict__                     # the lm_head is itself again
    assert model(input_ids=ids).logits.shape == (2, 9, 37)


def test_models_that_transform_their_logits_are_refused():
    model = _tiny_lm(True)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="Qwen3ForCausalLM has final_logit_softcapping=30.0"):
        output_projection(model)

    class Scaled(nn.Module):     # scales its logits without a config field saying so
        def __init__(self):
            super().__init__()
            self.lm = _tiny_lm(True)

        def get_output_embeddings(self):
            return self.lm.lm_head

        def forward(self, **kw):
            out = self.lm(**kw)
            out.logits = out.logits * 2
            return out

    scaled = Scaled()
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="Scaled changes the output of its lm_head"):
        model_token_cross_entropy(scaled, keep=torch.tensor([0, 1]), select=torch.ones(1, 2, dtype=torch.bool),
                                  targets=torch.tensor([2, 3]), input_ids=ids)
    assert "forward" not in scaled.lm.lm_head.__dict__


def test_through_ddp(tmp_path):
    """Under DDP (one gloo rank, unused-parameter search on: outputs come back as copies) the helper runs
    the wrapper's forward, so gradients are synchronised as usual, and equals the plain model."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    ids, keep = torch.tensor([[5, 6, 7, 8]]), torch.tensor([1, 2])
    select, targets = torch.ones(1, 2, dtype=torch.bool), torch.tensor([7, 8])
    plain = _tiny_lm(True)
    model_token_cross_entropy(plain, keep=keep, select=select, targets=targets, input_ids=ids).sum().backward()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    wrapped = ce = None
    try:
        wrapped = DistributedDataParallel(_tiny_lm(True), find_unused_parameters=True)
        ce = model_token_cross_entropy(wrapped, keep=keep, select=select, targets=targets, input_ids=ids)
        ce.sum().backward()
        for (k, p), q in zip(plain.named_parameters(), wrapped.module.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=k)
    finally:
        # The DDP reducer holds the process group: free it first, or the group's last reference goes with the
        # reducer after destroy_process_group, and gloo's teardown once hung there (a thread join).
        del wrapped, ce
        dist.destroy_process_group()


@pytest.mark.parametrize("bias", [False, True])
def test_under_bf16_autocast_it_equals_the_autocast_lm_head_and_float32_cross_entropy(bias):
    """The trainer's mixed precision: float32 weights, bf16 autocast. The plain path's lm_head runs in
    bf16 and its logits are taken to float32; the chunked CE must do the same (bf16 matmuls, float32
    softmax), not a slower float32 matmul, and give float32 gradients to the float32 leaves."""
    hidden, weight, b, targets, grad_out = _inputs(40, 32, 97, torch.float32, bias=bias)
    leaves = [t.detach().clone().requires_grad_() for t in (hidden, weight) + ((b,) if bias else ())]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(leaves[0], leaves[1], leaves[2] if bias else None)
        assert logits.dtype == torch.bfloat16
        want = F.cross_entropy(logits.float(), targets, reduction="none")
        got = linear_cross_entropy(hidden, weight, targets, bias=b, chunk_size=7)
    want.backward(grad_out.float())
    got.backward(grad_out.float())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)       # the same bf16 logits, the same float32 CE
    for g, w in zip([t.grad for t in (hidden, weight, b) if t is not None], [t.grad for t in leaves]):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * float(w.abs().max()))   # bf16 matmul rounding


def test_bf16_weights_without_autocast_take_bf16_matmuls_and_float64_ignores_autocast():
    """DeepSpeed bf16 (bf16 parameters, no autocast): the lm_head's matmul is bf16, so is the chunked CE's
    (not a float32 copy of the weight); float64 inputs stay float64 under autocast, as autocast leaves them."""
    hidden, weight, _, targets, grad_out = _inputs(12, 16, 33, torch.bfloat16)
    want = F.cross_entropy(F.linear(hidden.detach(), weight.detach()).float(), targets, reduction="none")
    got, grads = _chunked(hidden, weight, None, targets, grad_out, 5)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert all(g.dtype == torch.bfloat16 for g in grads)
    hidden, weight, _, targets, grad_out = _inputs(10, 6, 11, torch.float64)
    want, _ = _reference(hidden, weight, None, targets, grad_out)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = _chunked(hidden, weight, None, targets, grad_out, 3)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
