"""loss_impl chunked == loss_impl logits for every objective (loss and every gradient); the config key."""

import logging

import pytest
import torch

from tests.conftest import TINY_CORPUS, chat, write_lines
from textwm.models.checkpoint import load_model
from textwm.models.tiny import build_tiny_checkpoint
from textwm.training import linear_ce
from textwm.training.config import ConfigError, SFTConfig, load_config
from textwm.training.objectives import ARObjective, SDARObjective, WeDLMObjective
from textwm.training.trainer import prepare_model

# Two packed rows: row 0 holds two samples, row 1 one; prompt, then answer (labels), as the encoder makes them.
ROWS = [
    {"input_ids": [11, 12, 13, 21, 22, 23, 24, 25, 14, 15, 26, 27], "labels": [-100] * 3 + [21, 22, 23, 24, 25]
     + [-100, -100, 26, 27], "position_ids": list(range(8)) + list(range(4)), "sample_ids": [0] * 8 + [1] * 4,
     "noise_seeds": [101, 202]},
    {"input_ids": [16, 17, 18, 19, 28, 29, 30, 31], "labels": [-100] * 4 + [28, 29, 30, 31],
     "position_ids": list(range(8)), "sample_ids": [0] * 8, "noise_seeds": [303]},
]


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_sdar_moe"), TINY_CORPUS, family="sdar_moe",
                                 block_size=8, vocab_size=400, seed=4)


def _objective(kind, lm, loss_impl, **kw):
    common = dict(attn_implementation="sdpa", pad_token_id=lm.tokenizer.pad_token_id, loss_impl=loss_impl)
    if kind == "ar":
        return ARObjective(**common)
    if kind == "sdar":
        return SDARObjective(mask_token_id=lm.spec.mask_token_id, block_size=4, **common, **kw)
    return WeDLMObjective(mask_token_id=lm.spec.mask_token_id, noise_block=4, **common, **kw)


def _loss_and_grads(kind, lm, loss_impl, num_items, **kw):
    objective = _objective(kind, lm, loss_impl, **kw)
    lm.model.zero_grad(set_to_none=True)
    loss = objective.loss(lm.model, objective.collate(ROWS), num_items_in_batch=num_items)
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in lm.model.named_parameters() if p.grad is not None}


def _assert_same(kind, lm, monkeypatch, num_items=None, **kw):
    want, want_grads = _loss_and_grads(kind, lm, "logits", num_items, **kw)
    # Chunks of 2 rows: the CE (3 to 15 rows here) is taken in several chunks, the last one often short.
    monkeypatch.setattr(linear_ce, "CHUNK_BYTES", 2 * 4 * lm.model.config.vocab_size)
    got, grads = _loss_and_grads(kind, lm, "chunked", num_items, **kw)
    assert want > 0
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    assert grads.keys() == want_grads.keys() and len(grads) == len(list(lm.model.parameters()))
    for k, g in grads.items():
        scale = want_grads[k].abs().max()
        torch.testing.assert_close(g, want_grads[k], rtol=1e-4, atol=1e-5 * scale + 1e-9, msg=k)


@pytest.fixture(scope="module")
def models(tiny_ar_dir, tiny_sdar_dir, tiny_wedlm_dir, moe_dir):
    return {kind: load_model(path, device="cpu", dtype="float32")
            for kind, path in (("ar", tiny_ar_dir), ("sdar", tiny_sdar_dir), ("wedlm", tiny_wedlm_dir),
                               ("sdar_moe", moe_dir))}


@pytest.mark.parametrize("num_items", [None, 40])
def test_ar_chunked_equals_logits(models, monkeypatch, num_items):
    _assert_same("ar", models["ar"], monkeypatch, num_items)


@pytest.mark.parametrize("model", ["sdar", "sdar_moe"])
def test_sdar_chunked_equals_logits(models, monkeypatch, model):
    _assert_same("sdar", models[model], monkeypatch, num_items=None)


@pytest.mark.parametrize("normalisation", ["step_tokens", "micro_batch"])
@pytest.mark.parametrize("ar_weight", [0.0, 1.0, 0.5])
def test_wedlm_chunked_equals_logits(models, monkeypatch, normalisation, ar_weight):
    _assert_same("wedlm", models["wedlm"], monkeypatch, num_items=None, loss_normalisation=normalisation,
                 ar_weight=ar_weight)


@pytest.mark.parametrize("normalisation", ["step_tokens", "micro_batch"])
def test_wedlm_uniform_weighting_in_a_training_step_chunked_equals_logits(models, monkeypatch, normalisation):
    _assert_same("wedlm", models["wedlm"], monkeypatch, num_items=30, loss_normalisation=normalisation,
                 weighting="uniform", accumulation_steps=2)


# --- the config key -----------------------------------------------------------------------------------------


def test_loss_impl_is_a_checked_config_key(tiny_sdar_dir, tmp_path):
    assert SFTConfig(model_name_or_path="m", train_file="t").loss_impl == "logits"
    with pytest.raises(ConfigError, match="loss_impl must be one of logits, chunked, got 'fused'"):
        SFTConfig(model_name_or_path="m", train_file="t", loss_impl="fused")
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_file: t.jsonl\n")
    assert load_config(path, ["loss_impl=chunked"]).loss_impl == "chunked"
    with pytest.raises(ConfigError, match="loss_impl must be one of logits, chunked, got 'Chunked'"):
        load_config(path, ["loss_impl=Chunked"])
    with pytest.raises(ValueError, match="SDARObjective: loss_impl must be one of logits, chunked, got 'x'"):
        SDARObjective(attn_implementation="sdpa", pad_token_id=0, mask_token_id=1, block_size=4, loss_impl="x")


@pytest.mark.parametrize("objective", ["ar", "sdar", "wedlm"])
def test_prepare_model_passes_loss_impl_and_announces_it_once(objective, tiny_sdar_dir, caplog):
    config = SFTConfig(model_name_or_path=str(tiny_sdar_dir), train_file="unused.jsonl", objective=objective,
                       block_length=8, loss_impl="chunked")
    with caplog.at_level(logging.INFO, logger="textwm.training.trainer"):
        assert prepare_model(config, "sdpa")[2].loss_impl == "chunked"
    assert caplog.text.count("loss_impl chunked") == 1


def test_a_model_with_softcapped_logits_is_refused_when_prepared(tiny_ar_dir, tmp_path):
    import json
    import shutil

    start = shutil.copytree(tiny_ar_dir, tmp_path / "capped")
    config = json.loads((start / "config.json").read_text())
    (start / "config.json").write_text(json.dumps({**config, "final_logit_softcapping": 30.0}))
    with pytest.raises(ConfigError, match="Qwen3ForCausalLM has final_logit_softcapping=30.0"):
        prepare_model(SFTConfig(model_name_or_path=str(start), train_file="unused.jsonl", objective="ar",
                                loss_impl="chunked"), "sdpa")


@pytest.mark.parametrize("objective", ["ar", "sdar", "wedlm"])
def test_one_training_step_is_the_same_with_either_loss_impl(objective, request, tmp_path):
    """The trainer end to end: one SGD step from the same start gives the same weights."""
    from safetensors.torch import load_file

    from textwm.training.trainer import train

    start = request.getfixturevalue({"ar": "tiny_ar_dir", "sdar": "tiny_sdar_dir", "wedlm": "tiny_wedlm_dir"}[objective])
    rooms = ["kitchen", "hallway", "garden"]
    data = write_lines(tmp_path / "train.jsonl", [chat(user=f"State: in the {a}.\n\nAction: go to {b}",
                                                        answer=f"You move to the {b}.") for a in rooms for b in rooms])
    weights = {}
    for impl in ("logits", "chunked"):
        train(SFTConfig(model_name_or_path=str(start), train_file=str(data), output_dir=str(tmp_path / impl),
                        objective=objective, block_length=8, cutoff_len=256, optim="sgd", learning_rate=0.5,
                        max_grad_norm=1e9, per_device_train_batch_size=3, max_steps=1, logging_steps=1,
                        save_steps=1000, warmup_ratio=0.0, lr_scheduler_type="constant", loss_impl=impl))
        weights[impl] = load_file(str(tmp_path / impl / "model.safetensors"))
    base = load_file(str(start / "model.safetensors"))
    for k in base:
        step = (weights["logits"][k] - base[k]).abs().max()
        torch.testing.assert_close(weights["chunked"][k], weights["logits"][k], rtol=0, atol=1e-6 + 1e-4 * step,
                                   msg=k)


def test_an_override_can_empty_a_text_key_and_null_says_how(tmp_path):
    """scripts/gpu_check.sh switches evaluation off with eval_file='""'; eval_file=null is refused with the way."""
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_file: t.jsonl\neval_file: dev.jsonl\n")
    assert load_config(path, ['eval_file=""']).eval_file == ""
    with pytest.raises(ConfigError, match="eval_file must not be null \\(expected str\\) \\(an empty text is"):
        load_config(path, ["eval_file=null"])
