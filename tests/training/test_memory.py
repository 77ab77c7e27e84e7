"""The memory estimate (textwm.training.memory) against peaks measured on an H200, and the check's messages."""

import pytest

from textwm.training import memory
from textwm.training.config import SFTConfig

# Qwen3-1.7B's shape with its 151,936-row (tied) vocabulary: 1.721B parameters.
QWEN3_1_7B = memory.ModelShape(params=1_721_000_000, layers=28, hidden=2048, intermediate=6144, q_width=2048,
                               kv_width=1024, vocab=151936)
H200 = 139.8 * memory.GIB


def _plan(objective="sdar", rows=4, cutoff=4096, **keys):
    config = SFTConfig(model_name_or_path="m", train_file="t", objective=objective, per_device_train_batch_size=rows,
                       **keys)
    return memory.plan_for(config, row_tokens=cutoff, answer_share=0.3)


def _estimate_gib(plan):
    return (memory.estimate(QWEN3_1_7B, plan).total - memory.RUNTIME_OVERHEAD) / memory.GIB


# torch.cuda.max_memory_allocated() of scripts/bench_train.py arms on the H200 (scripts/results/README.md).
MEASURED = [
    (dict(objective="ar", loss_impl="logits"), 89.5),
    (dict(objective="ar", loss_impl="chunked"), 80.8),
    (dict(objective="sdar", loss_impl="chunked"), 138.5),
    (dict(objective="wedlm", loss_impl="chunked"), 138.5),
    (dict(objective="sdar", loss_impl="chunked", gradient_checkpointing=True), 32.4),
    (dict(objective="sdar", loss_impl="chunked", gradient_checkpointing=True, gradient_checkpointing_mode="ops"), 66.3),
    (dict(objective="sdar", loss_impl="chunked", gradient_checkpointing=True, gradient_checkpointing_every=2), 83.7),
    (dict(objective="sdar", loss_impl="chunked", gradient_checkpointing=True, activation_offload=True), 30.7),
    (dict(objective="sdar", loss_impl="chunked", optim="adamw_bnb_8bit"), 128.9),
    (dict(objective="sdar", loss_impl="chunked", torch_compile=True), 90.1),
    (dict(objective="sdar", loss_impl="chunked", torch_compile=True, gradient_checkpointing=True, rows=8,
          cutoff=8192), 59.5),
]


@pytest.mark.parametrize(("keys", "peak_gib"), MEASURED)
def test_the_estimate_is_within_ten_percent_of_the_measured_peak(keys, peak_gib):
    assert _estimate_gib(_plan(**keys)) == pytest.approx(peak_gib, rel=0.1)


def test_the_arms_that_ran_out_of_memory_are_estimated_not_to_fit():
    for objective in ("sdar", "wedlm"):          # loss_impl logits, 4 x 4096: CUDA out of memory on the H200
        fits, line = memory.check_fits(QWEN3_1_7B, _plan(objective), H200, on_fail="warn")
        assert not fits and "this step will not fit (4 rows x 4096 tokens + 4096 of the noisy copy)" in line


def test_a_step_that_does_not_fit_stops_with_what_to_change():
    with pytest.raises(memory.MemoryCheckError) as err:
        memory.check_fits(QWEN3_1_7B, _plan("sdar", rows=8, cutoff=8192), H200, on_fail="error")
    text = str(err.value)
    assert text.startswith("memory estimate per GPU: ")
    assert "gradient_checkpointing: true" in text and "per_device_train_batch_size: " in text
    assert "memory_check: warn starts anyway" in text
    for line in text.splitlines()[1:-1]:           # every suggestion carries its own estimate, under the budget
        gib = float(line.rsplit("(~", 1)[1].split(" GiB")[0])
        assert gib * memory.GIB <= memory.USABLE_SHARE * H200


def test_a_step_that_fits_gives_one_line():
    fits, line = memory.check_fits(QWEN3_1_7B, _plan("ar", loss_impl="chunked"), H200, on_fail="error")
    assert fits and "\n" not in line and line.endswith("of 139.8 GiB")


def test_zero_and_fsdp_shard_what_they_shard():
    assert memory.zero_shards({"zero_optimization": {"stage": 2}}, "", 8) == {
        "deepspeed": True, "offload_optimizer": False, "offload_params": False,
        "shard_optimizer": 8, "shard_grads": 8, "shard_weights": 1}
    assert memory.zero_shards({"zero_optimization": {"stage": 3}}, "", 4)["shard_weights"] == 4
    assert memory.zero_shards(None, "full_shard auto_wrap", 2) == {
        "shard_optimizer": 2, "shard_grads": 2, "shard_weights": 2}
    assert memory.zero_shards(None, "", 1) == {}
    single, zero3 = _plan("sdar"), memory.MemoryPlan(**{**_plan("sdar").__dict__, "shard_weights": 8,
                                                        "shard_grads": 8, "shard_optimizer": 8})
    assert memory.estimate(QWEN3_1_7B, zero3).total < memory.estimate(QWEN3_1_7B, single).total


def test_the_plan_follows_the_config():
    plan = _plan("wedlm", rows=2, cutoff=1024, loss_impl="chunked", gradient_checkpointing=True,
                 gradient_checkpointing_mode="ops", gradient_checkpointing_every=3, torch_compile=True)
    assert (plan.rows, plan.row_tokens, plan.noisy_tokens, plan.loss_share) == (2, 1024, 1024, 0.6)
    assert (plan.checkpointing, plan.mode, plan.every, plan.compiled, plan.loss_impl) == (True, "ops", 3, True, "chunked")
    assert _plan("ar").noisy_tokens == 0 and _plan("ar").loss_share == 0.3


def test_deepspeed_offload_moves_the_weights_and_optimizer_off_the_gpu():
    """One H200, an 8B model, ZeRO-3 with parameters and optimizer offloaded (sdar/configs/ds_z3_offload.json):
    what stays on the GPU is activations and gradients, so the check lets it start."""
    import json
    from pathlib import Path

    ds = json.loads((Path(__file__).resolve().parents[2] / "sdar/configs/ds_z3_offload.json").read_text())
    eight_b = memory.ModelShape(params=8_190_000_000, layers=36, hidden=4096, intermediate=12288, q_width=4096,
                                kv_width=1024, vocab=151936)
    config = SFTConfig(model_name_or_path="m", train_file="t", objective="sdar", per_device_train_batch_size=1,
                       loss_impl="chunked", gradient_checkpointing=True)
    offload = memory.plan_for(config, row_tokens=4096, answer_share=0.3, deepspeed_config=ds)
    assert offload.deepspeed and offload.offload_optimizer and offload.offload_params
    est = memory.estimate(eight_b, offload)
    assert est.weights == 0 and est.optimizer == 0
    assert memory.check_fits(eight_b, offload, H200, on_fail="error")[0]
    plain = memory.plan_for(config, row_tokens=4096, answer_share=0.3)
    assert memory.estimate(eight_b, plain).total > est.total + 100 * memory.GIB


def test_memory_share_must_be_a_share():
    from textwm.config import ConfigError
    from textwm.training.config import SFTConfig

    with pytest.raises(ConfigError, match=r"memory_share must be in \(0, 1\], got 0"):
        SFTConfig(model_name_or_path="m", train_file="t.jsonl", memory_share=0)
