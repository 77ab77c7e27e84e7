"""The trainer end to end on tiny models (CPU, seconds each)."""

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from textwm.data.jsonl import DataError
from textwm.models.checkpoint import CheckpointError, read_spec
from textwm.training.config import ConfigError, SFTConfig, load_config
from textwm.training.trainer import CONFIG_FILE, train


def _config(model, train_file, out, **kw) -> SFTConfig:
    base = dict(model_name_or_path=str(model), train_file=str(train_file), output_dir=str(out), cutoff_len=256,
                learning_rate=1e-2, per_device_train_batch_size=2, max_steps=1, logging_steps=1, save_steps=1000,
                warmup_ratio=0.0, lr_scheduler_type="constant", block_length=8)
    base.update(kw)
    return SFTConfig(**base)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


STARTS = {"ar": "tiny_ar_dir", "sdar": "tiny_sdar_dir", "wedlm": "tiny_wedlm_dir"}


@pytest.mark.parametrize("objective", ["ar", "sdar", "wedlm"])
def test_one_step_changes_parameters(objective, request, train_file, tmp_path):
    start = request.getfixturevalue(STARTS[objective])
    result = train(_config(start, train_file, tmp_path / "out", objective=objective))
    assert result.global_step == 1 and result.train_loss > 0
    before, after = _weights(start), _weights(tmp_path / "out")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) >= len(before) - 2, changed
    assert (tmp_path / "out" / CONFIG_FILE).exists()
    assert read_spec(tmp_path / "out").family == objective


@pytest.mark.parametrize("objective", ["sdar", "wedlm"])
def test_an_ar_checkpoint_is_converted_to_the_diffusion_family(objective, tiny_ar_dir, train_file, tmp_path):
    train(_config(tiny_ar_dir, train_file, tmp_path / "out", objective=objective, block_length=4))
    spec = read_spec(tmp_path / "out")
    assert spec.family == objective and spec.block_size == 4 and spec.mask_token_id is not None
    # SDAR gets its own model type; WeDLM keeps the architecture (it decodes with causal attention).
    assert spec.model_type == ("sdar" if objective == "sdar" else "qwen3")


@pytest.mark.parametrize("objective", ["ar", "sdar", "wedlm"])
def test_gradient_accumulation_equals_the_large_batch(objective, request, train_file, tmp_path):
    """One SGD step with batch 4 == one step with batch 2 x 2 accumulation (loss normalised per step)."""
    start = request.getfixturevalue(STARTS[objective])
    common = dict(objective=objective, optim="sgd", learning_rate=0.5, max_grad_norm=1e9)
    train(_config(start, train_file, tmp_path / "big", per_device_train_batch_size=4, **common))
    train(_config(start, train_file, tmp_path / "acc", per_device_train_batch_size=2,
                  gradient_accumulation_steps=2, **common))
    train(_config(start, train_file, tmp_path / "one", per_device_train_batch_size=1,
                  gradient_accumulation_steps=4, **common))
    base, big, acc, one = (_weights(p) for p in (start, tmp_path / "big", tmp_path / "acc", tmp_path / "one"))
    for k in base:
        step = (big[k] - base[k]).abs().max()
        assert torch.allclose(big[k], acc[k], atol=1e-6 + 1e-4 * step), k
        assert torch.allclose(big[k], one[k], atol=1e-6 + 1e-4 * step), k


def test_resume_from_checkpoint_matches_uninterrupted_run(tiny_sdar_dir, train_file, tmp_path):
    full = _config(tiny_sdar_dir, train_file, tmp_path / "full", max_steps=4, save_steps=2)
    train(full)
    assert (tmp_path / "full" / "checkpoint-2" / CONFIG_FILE).exists()  # resolved config in every checkpoint
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "full" / "checkpoint-2", resumed_dir / "checkpoint-2")
    train(_config(tiny_sdar_dir, train_file, resumed_dir, max_steps=4, save_steps=2, resume_from_checkpoint=True))
    a, b = _weights(tmp_path / "full"), _weights(resumed_dir)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_bad_inputs_are_clear(tiny_sdar_dir, train_file, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="file is empty"):
        train(_config(tiny_sdar_dir, empty, tmp_path / "o1"))
    with pytest.raises(DataError, match=r"no train sample left: all 16 rows are longer than cutoff_len \(16\)"):
        train(_config(tiny_sdar_dir, train_file, tmp_path / "o2", cutoff_len=16))
    with pytest.raises(CheckpointError, match="trained with block_size 8 but block_length is 4"):
        train(_config(tiny_sdar_dir, train_file, tmp_path / "o3", block_length=4))


def test_truncate_mode_cut_trains_on_cut_rows(tiny_ar_dir, train_file, tmp_path, caplog):
    result = train(_config(tiny_ar_dir, train_file, tmp_path / "o", objective="ar", cutoff_len=24, truncate_mode="cut"))
    assert result.global_step == 1
    assert "16 prompts cut to fit" in caplog.text


def test_shipped_configs_load(repo):
    configs = sorted([*(repo / "sdar" / "configs").glob("*.yaml"), *(repo / "wedlm" / "configs").glob("*.yaml")])
    assert len(configs) >= 6
    for path in configs:
        cfg = load_config(path)
        assert cfg.objective in (("wedlm",) if path.parent.parent.name == "wedlm" else ("ar", "sdar"))
        assert path.read_text().startswith("#")  # header comment = the launch command


def test_config_errors(tmp_path, caplog):
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_file: t.jsonl\nlearning_rte: 0.1\n")
    with pytest.raises(ConfigError, match="unknown config key.*'learning_rte' \\(did you mean 'learning_rate'\\?\\)"):
        load_config(path)
    path.write_text("model_name_or_path: m\ntrain_file: t.jsonl\nstage: sft\nfinetuning_type: full\n")
    cfg = load_config(path, ["max_steps=7", "bf16=true", "objective=ar"])
    assert (cfg.max_steps, cfg.bf16, cfg.objective) == (7, True, "ar")
    assert "ignoring keys that do not apply here: finetuning_type, stage" in caplog.text
    with pytest.raises(ConfigError, match="cutoff_len \\(10\\) must be a multiple of block_length"):
        load_config(path, ["cutoff_len=10"])
    cfg = load_config(path, ["learning_rate=3e-3", "max_steps=10.0", "warmup_ratio=0"])  # PyYAML: "3e-3" is a str
    assert (cfg.learning_rate, cfg.max_steps, cfg.warmup_ratio) == (3e-3, 10, 0.0)
    with pytest.raises(ConfigError, match="learning_rate must be a number, got 'fast'"):
        load_config(path, ["learning_rate=fast"])
    with pytest.raises(ConfigError, match="max_steps must be an integer, got 2.5"):
        load_config(path, ["max_steps=2.5"])
    with pytest.raises(ConfigError, match="bf16 must be true or false"):
        load_config(path, ["bf16=maybe"])
    with pytest.raises(ConfigError, match="exactly one of train_file"):
        SFTConfig(model_name_or_path="m")


def test_dataset_name_resolves_through_dataset_info(tmp_path):
    (tmp_path / "dataset_info.json").write_text('{"wm": {"file_name": "wm.jsonl", "formatting": "sharegpt"}}')
    cfg = SFTConfig(model_name_or_path="m", dataset="wm", dataset_dir=str(tmp_path))
    assert cfg.resolve_train_file() == tmp_path / "wm.jsonl"
    with pytest.raises(DataError, match="no dataset named 'other'"):
        SFTConfig(model_name_or_path="m", dataset="other", dataset_dir=str(tmp_path)).resolve_train_file()
