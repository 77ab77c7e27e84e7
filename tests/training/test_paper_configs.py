"""The paper's training configs run here: its WeDLM YAML (Tencent/WeDLM finetune keys) and train.sh, the
DeepSpeed path of its LlamaFactory SDAR YAML; message-array rows train."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, chat, write_lines
from tests.diffusion.test_wedlm_objective import ROWS, _terms_by_definition
from textwm.config import ConfigCLI
from textwm.diffusion.sdar import IGNORE_INDEX
from textwm.models.checkpoint import load_model, read_spec
from textwm.training.config import IGNORED_LLAMAFACTORY_KEYS, ConfigError, SFTConfig, load_config
from textwm.training.objectives import WeDLMObjective
from textwm.training.paper_keys import (
    LLAMAFACTORY_DEEPSPEED,
    PAPER_WEDLM_KEYS,
    expand_paper_argv,
    is_paper_wedlm,
    our_deepspeed_dir,
    resolve_deepspeed,
)
from textwm.training.trainer import CONFIG_FILE, prepare_reporting_and_deepspeed, train

#: The keys and values of the paper's wedlm/configs/example.yaml (patronus-ai/mdlm_world_modeling).
PAPER_WEDLM = {
    "model_path": "tencent/WeDLM-8B-Base", "trust_remote_code": True, "train_data": "./data/train.jsonl",
    "max_seq_length": 2048, "block_size": 32, "mask_per_block": True, "loss_weighting_scheme": "weighted",
    "mask_eps": 1.0e-8, "num_learnable_im_end": 0, "enable_ar_loss": True, "ar_loss_weight": 1.0,
    "attention_backend": "dense", "output_dir": "./outputs/wedlm-sft", "num_train_epochs": 1,
    "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "learning_rate": 3.0e-6,
    "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0,
    "rebuild_cache": False, "use_deepspeed": True, "deepspeed_zero_stage": 2, "deepspeed_offload_optimizer": True,
    "deepspeed_offload_param": False, "logging_steps": 10, "save_steps": 500, "save_total_limit": 3, "bf16": True,
    "seed": 42, "use_wandb": False, "wandb_project": "wedlm-sft",
}

#: The keys and values of the paper's sdar/configs/sft_example.yaml (LlamaFactory's).
PAPER_SDAR = {
    "model_name_or_path": "./model/SDAR-8B-Chat", "train_from_scratch": False, "trust_remote_code": True,
    "stage": "sft", "do_train": True, "finetuning_type": "full", "freeze_vision_tower": True,
    "freeze_multi_modal_projector": False, "freeze_language_model": True,
    "deepspeed": "examples/deepspeed/ds_z3_config.json", "use_dft_loss": False, "dataset": "my_dataset",
    "template": "qwen3", "block_length": 4, "cutoff_len": 16384, "truncate_mode": "drop", "overwrite_cache": False,
    "tokenized_path": "./tokenized_cache/my_dataset", "preprocessing_num_workers": 32, "dataloader_num_workers": 4,
    "neat_packing": True, "output_dir": "./outputs/sdar_sft", "logging_steps": 1, "save_steps": 500,
    "save_total_limit": 5, "plot_loss": True, "overwrite_output_dir": True, "save_only_model": False,
    "report_to": "none", "run_name": "sdar_sft", "include_effective_tokens_per_second": True,
    "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "learning_rate": 1.0e-5,
    "num_train_epochs": 1.0, "lr_scheduler_type": "constant_with_warmup", "warmup_ratio": 0.03, "bf16": True,
    "ddp_timeout": 180000000, "resume_from_checkpoint": None,
}


def _yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _load(tmp_path: Path, data: dict, overrides: list[str] | None = None) -> SFTConfig:
    return load_config(_yaml(tmp_path / "paper.yaml", data), [f"output_dir={tmp_path / 'out'}", *(overrides or [])])


# --- the paper's WeDLM YAML --------------------------------------------------------------------------------


def test_the_papers_wedlm_yaml_maps_onto_our_config(tmp_path, caplog):
    cfg = _load(tmp_path, PAPER_WEDLM)
    assert (cfg.objective, cfg.model_name_or_path, cfg.train_file) == ("wedlm", "tencent/WeDLM-8B-Base",
                                                                        "./data/train.jsonl")
    assert (cfg.cutoff_len, cfg.neat_packing, cfg.truncate_mode, cfg.block_length) == (2048, True, "drop", 32)
    assert (cfg.wedlm_loss_weighting, cfg.wedlm_ar_loss_weight, cfg.attn_implementation) == ("weighted", 1.0, "sdpa")
    assert (cfg.learning_rate, cfg.warmup_ratio, cfg.weight_decay, cfg.max_grad_norm) == (3e-6, 0.1, 0.01, 1.0)
    assert (cfg.num_train_epochs, cfg.gradient_accumulation_steps, cfg.save_total_limit, cfg.bf16) == (1.0, 1, 3, True)
    assert (cfg.report_to, cfg.wandb_project, cfg.final_dir) == ("none", "wedlm-sft", "final")
    # use_deepspeed: Tencent/WeDLM's generated config (ZeRO-2, optimizer offloaded to the CPU), kept until the
    # trainer writes it into the output_dir of the command line (not the YAML's).
    assert cfg.deepspeed == str(tmp_path / "out" / "deepspeed_config.json") and not Path(cfg.deepspeed).exists()
    zero = cfg._generated_deepspeed["zero_optimization"]
    assert zero["stage"] == 2 and zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert "offload_param" not in zero and cfg._generated_deepspeed["train_micro_batch_size_per_gpu"] == "auto"
    for needle in ("read in the paper's WeDLM format", "trust_remote_code: accepted",
                   "rebuild_cache: false: accepted", "attention_backend: dense -> attn_implementation: sdpa",
                   "max_seq_length 2048: samples longer than it are dropped"):
        assert needle in caplog.text
    assert "_generated_deepspeed" not in cfg.to_dict()


def test_the_command_line_wins_over_a_paper_yaml(tmp_path):
    path = _yaml(tmp_path / "paper.yaml", PAPER_WEDLM)
    argv, paper = expand_paper_argv(["--config", str(path), "max_steps=3", "block_length=8", "--learning-rate", "0.5",
                                     f"output_dir={tmp_path / 'o'}"])
    cfg = paper.finish(ConfigCLI(SFTConfig, ignored_keys=IGNORED_LLAMAFACTORY_KEYS).parse(argv)[0])
    assert (cfg.max_steps, cfg.block_length, cfg.learning_rate, cfg.cutoff_len) == (3, 8, 0.5, 2048)
    assert cfg.deepspeed == str(tmp_path / "o" / "deepspeed_config.json")
    ours = _yaml(tmp_path / "ours.yaml", {"model_name_or_path": "m", "train_file": "t.jsonl"})
    assert expand_paper_argv(["--config", str(ours)]) == (["--config", str(ours)], None)


def test_keys_left_out_take_tencent_wedlms_defaults(tmp_path, caplog):
    cfg = _load(tmp_path, {"model_path": "m", "train_data": "t.jsonl", "num_learnable_im_end": 0})
    assert (cfg.block_length, cfg.gradient_accumulation_steps, cfg.num_train_epochs, cfg.bf16) == (32, 8, 3.0, True)
    assert cfg.attn_implementation == "auto" and cfg.deepspeed == "" and cfg.report_to == "none"
    assert "keys not set take Tencent/WeDLM's defaults: block_size 32" in caplog.text


@pytest.mark.parametrize(("change", "want"), [
    ({"enable_ar_loss": False}, {"wedlm_ar_loss_weight": 0.0}),
    ({"ar_loss_weight": 0.5}, {"wedlm_ar_loss_weight": 0.5}),
    ({"loss_weighting_scheme": "uniform"}, {"wedlm_loss_weighting": "uniform"}),
    ({"attention_backend": "magi"}, {"attn_implementation": "auto"}),
    ({"use_wandb": True, "wandb_team": "lab", "wandb_group": "g"},
     {"report_to": "wandb", "wandb_project": "wedlm-sft", "wandb_entity": "lab", "wandb_group": "g"}),
    ({"use_deepspeed": False, "truncate_mode": "cut", "gradient_checkpointing": True},
     {"deepspeed": "", "truncate_mode": "cut", "gradient_checkpointing": True}),
    ({"num_learnable_im_end": 1, "stage": "sft"}, {"block_length": 32}),
])
def test_accepted_values_and_our_keys_mixed_in(tmp_path, change, want):
    cfg = _load(tmp_path, {**PAPER_WEDLM, **change})
    assert {k: getattr(cfg, k) for k in want} == want


def test_deepspeed_keys_follow_tencent_wedlms_rule(tmp_path, caplog):
    z3 = _load(tmp_path, {**PAPER_WEDLM, "deepspeed_zero_stage": 3, "deepspeed_offload_param": True,
                          "deepspeed_offload_nvme": True, "deepspeed_nvme_path": "/nvme"})._generated_deepspeed
    zero = z3["zero_optimization"]
    assert zero["offload_param"] == zero["offload_optimizer"] == {"device": "nvme", "pin_memory": True,
                                                                   "nvme_path": "/nvme"}
    assert zero["stage3_gather_16bit_weights_on_model_save"] and zero["stage3_max_live_parameters"] == 10**9
    _load(tmp_path, {**PAPER_WEDLM, "deepspeed_offload_param": True})
    assert "deepspeed_offload_param: true is ignored at ZeRO stage 2" in caplog.text
    named = write_lines(tmp_path / "ds.json", [{"zero_optimization": {"stage": 1}}])
    cfg = _load(tmp_path, {**PAPER_WEDLM, "deepspeed_config_file": str(named)})
    assert cfg.deepspeed == str(named) and cfg._generated_deepspeed is None


def test_the_trainer_writes_the_generated_deepspeed_config_and_the_wandb_environment(tmp_path, monkeypatch):
    for env in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(env, raising=False)
    cfg = _load(tmp_path, {**PAPER_WEDLM, "use_wandb": True, "wandb_team": "lab"})
    prepare_reporting_and_deepspeed(cfg)
    assert json.loads(Path(cfg.deepspeed).read_text()) == cfg._generated_deepspeed
    assert (os.environ["WANDB_PROJECT"], os.environ["WANDB_ENTITY"]) == ("wedlm-sft", "lab")
    assert "WANDB_RUN_GROUP" not in os.environ


@pytest.mark.parametrize(("change", "needle"), [
    ({"mask_per_block": False}, "mask_per_block: False .*not implemented.*set mask_per_block: true"),
    ({"mask_eps": 1e-3}, "mask_eps: 0.001 is not implemented.*set mask_eps: 1.0e-8"),
    ({"num_learnable_im_end": 8}, "num_learnable_im_end: 8 appends 7 extra.*set num_learnable_im_end: 0"),
    ({"num_learnable_im_end": None}, "num_learnable_im_end: 8 is not set, and Tencent/WeDLM's default is 8"),
    ({"loss_weighting_scheme": "focal"}, "loss_weighting_scheme: 'focal' is not one of weighted, uniform"),
    ({"ar_loss_weight": -1.0}, "ar_loss_weight: -1.0 must be >= 0"),
    ({"attention_backend": "flash"}, "attention_backend: 'flash' is not one of dense, magi"),
    ({"wandb_key": "secret"}, "wandb_key: '...' is not read from a YAML here: set WANDB_API_KEY"),
    ({"wandb_host": "http://w"}, "wandb_host: 'http://w' .*set WANDB_BASE_URL"),
    ({"deepspeed_zero_stage": 4}, "deepspeed_zero_stage: 4 is not a ZeRO stage"),
    ({"deepspeed_zero_stage": 0}, "deepspeed_offload_optimizer: True needs ZeRO stage 1 or more"),
    ({"objective": "sdar"}, "objective: 'sdar' with the paper's WeDLM keys"),
    ({"model_name_or_path": "x"}, "sets both model_path \\(the paper's key\\) and model_name_or_path"),
    ({"deepspeed": "sdar/configs/ds_z3.json"}, "sets both use_deepspeed .* and deepspeed"),
    ({"block_sise": 8}, "unknown config key 'block_sise' \\(did you mean 'block_size'\\?\\)"),
    ({"deepspeed_config_file": "missing.json"}, "deepspeed file 'missing.json' does not exist"),
])
def test_refused_values_name_the_key_the_value_and_what_to_use(tmp_path, change, needle):
    data = {**PAPER_WEDLM, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ConfigError, match=needle):
        _load(tmp_path, data)


def test_the_readme_table_and_the_shipped_example_cover_every_paper_key(repo, tmp_path):
    readme = (repo / "wedlm" / "README.md").read_text()
    assert not [k for k in PAPER_WEDLM_KEYS if f"`{k}`" not in readme]
    shipped = yaml.safe_load((repo / "wedlm" / "configs" / "example.yaml").read_text())
    assert is_paper_wedlm(shipped) and set(PAPER_WEDLM) <= set(shipped)
    cfg = load_config(repo / "wedlm" / "configs" / "example.yaml", [f"output_dir={tmp_path}"])
    assert cfg.attn_implementation == "auto" and cfg._generated_deepspeed["zero_optimization"]["stage"] == 3
    assert not is_paper_wedlm(PAPER_SDAR)


# --- the objective's new options -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def wedlm(tiny_wedlm_dir):
    return load_model(tiny_wedlm_dir, device="cpu", dtype="float32")


@pytest.mark.parametrize("weighting", ["weighted", "uniform"])
@pytest.mark.parametrize("ar_weight", [0.0, 3.0])
def test_ar_weight_and_uniform_weighting_equal_their_definitions(wedlm, weighting, ar_weight):
    """(mlm + w * ar) / (1 + w) (Tencent/WeDLM train_step); uniform: each mask's CE unweighted (compute_mlm_loss)."""
    def objective(**kw):
        return WeDLMObjective(attn_implementation="sdpa", pad_token_id=wedlm.tokenizer.pad_token_id,
                              mask_token_id=wedlm.spec.mask_token_id, noise_block=4, ar_weight=ar_weight,
                              weighting=weighting, **kw)

    batch = objective().collate(ROWS)
    mlm, ar = _terms_by_definition(wedlm, batch)
    weights = [1.0 / g if weighting == "weighted" else 1.0 for _, g in mlm]
    n_answer = int((batch["labels"] != IGNORE_INDEX).sum())
    step_tokens = (sum(c * w for (c, _), w in zip(mlm, weights)) + ar_weight * sum(ar)) / (1 + ar_weight) / n_answer
    micro = (sum(c * w for (c, _), w in zip(mlm, weights)) / sum(weights) + ar_weight * sum(ar) / len(ar)) / (
        1 + ar_weight)
    assert objective().loss(wedlm.model, batch).item() == pytest.approx(step_tokens, rel=1e-5)
    assert objective(loss_normalisation="micro_batch").loss(wedlm.model, batch).item() == pytest.approx(micro, rel=1e-5)


def test_message_array_rows_train_with_the_papers_keys(tiny_wedlm_dir, tmp_path):
    rows = [chat(user=f"State: room {i}\n\nAction: look", answer=f"You see room {i}.")["messages"] for i in range(6)]
    data = write_lines(tmp_path / "train.jsonl", rows)  # one JSON array of messages per line (no "messages" key)
    cfg = _load(tmp_path, {**PAPER_WEDLM, "model_path": str(tiny_wedlm_dir), "train_data": str(data),
                           "max_seq_length": 256, "block_size": 8, "use_deepspeed": False, "bf16": False,
                           "enable_ar_loss": False, "per_device_train_batch_size": 2}, ["max_steps=1"])
    result = train(cfg)
    assert result.global_step == 1 and result.output_dir == tmp_path / "out" / "final"
    assert read_spec(result.output_dir).family == "wedlm" and (result.output_dir / CONFIG_FILE).exists()
    assert load_config(result.output_dir / CONFIG_FILE).wedlm_ar_loss_weight == 0.0  # the saved config reads back


# --- wedlm/train.sh ----------------------------------------------------------------------------------------


def _train_sh(env: dict, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(REPO / "wedlm" / "train.sh"), *args], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=600)


def test_train_sh_knobs(tmp_path):
    res = _train_sh({"NUM_GPUS": "8", "TORCHRUN": "echo", "CONFIG": "configs/example.yaml"}, "max_steps=2",
                    cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["--standalone", "--nnodes", "1", "--nproc_per_node", "8", "--master_port", "29500",
                                  str(REPO / "wedlm" / "train.py"), "--config",
                                  str(REPO / "wedlm" / "configs" / "example.yaml"), "max_steps=2"]
    for env, needle in (({"NUM_GPUS": "0"}, "NUM_GPUS must be a whole number"),
                        ({"MIXED_PRECISION": "fp32"}, "MIXED_PRECISION must be bf16, fp16 or no"),
                        ({"CONFIG": "configs/nope.yaml"}, f"CONFIG=configs/nope.yaml not found (looked in {tmp_path}")):
        res = _train_sh({"NUM_GPUS": "1", **env}, cwd=tmp_path)
        assert res.returncode == 2 and needle in res.stderr, res.stderr


@pytest.mark.slow
def test_train_sh_trains_a_tiny_wedlm_model_from_a_paper_yaml_on_cpu(tiny_wedlm_dir, tmp_path):
    rows = [chat(user=f"State: room {i}\n\nAction: open door", answer=f"The door {i} is open.")["messages"]
            for i in range(8)]
    data = write_lines(tmp_path / "train.jsonl", rows)
    (tmp_path / "run").mkdir()
    _yaml(tmp_path / "run" / "tiny.yaml", {**PAPER_WEDLM, "model_path": str(tiny_wedlm_dir), "train_data": str(data),
                                           "max_seq_length": 256, "block_size": 8, "use_deepspeed": False,
                                           "bf16": False, "output_dir": str(tmp_path / "out"),
                                           "per_device_train_batch_size": 2})
    res = _train_sh({"NUM_GPUS": "1", "CONFIG": "tiny.yaml", "VENV_DIR": "/x", "MIXED_PRECISION": "no"},
                    "max_steps=2", cwd=tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "VENV_DIR is not needed" in res.stderr and "MIXED_PRECISION=no is not used" in res.stderr
    assert "training done: 2 steps" in res.stderr
    final = tmp_path / "out" / "final"
    assert read_spec(final).family == "wedlm" and (final / "model.safetensors").exists()


# --- the deepspeed path of the paper's SDAR YAML ---------------------------------------------------------------

#: ZeRO stage and offloads of LlamaFactory's bundled examples/deepspeed configs (hiyouga/LLaMA-Factory).
LLAMAFACTORY_ZERO = {"ds_z0_config.json": (0, False, False), "ds_z2_config.json": (2, False, False),
                     "ds_z2_offload_config.json": (2, True, False), "ds_z3_config.json": (3, False, False),
                     "ds_z3_offload_config.json": (3, True, True)}


def test_the_papers_sdar_yaml_deepspeed_path_maps_onto_ours(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)  # as a user's run folder: no LlamaFactory checkout beside it
    cfg = load_config(_yaml(tmp_path / "sft_example.yaml", PAPER_SDAR))
    assert cfg.deepspeed == str(our_deepspeed_dir() / "ds_z3.json") and cfg.objective == "sdar"
    assert "examples/deepspeed/ds_z3_config.json is LlamaFactory's bundled ds_z3_config.json" in caplog.text


@pytest.mark.parametrize("name", sorted(LLAMAFACTORY_ZERO))
def test_each_llamafactory_name_has_our_equivalent(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ours = json.loads(Path(resolve_deepspeed(f"examples/deepspeed/{name}")).read_text())
    zero = ours["zero_optimization"]
    assert (zero["stage"], "offload_optimizer" in zero, "offload_param" in zero) == LLAMAFACTORY_ZERO[name]
    assert ours["train_micro_batch_size_per_gpu"] == ours["gradient_accumulation_steps"] == "auto"
    assert set(LLAMAFACTORY_DEEPSPEED) == set(LLAMAFACTORY_ZERO)


def test_a_deepspeed_path_that_exists_is_kept_and_another_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_lines(tmp_path / "examples_ds.json", [{"zero_optimization": {"stage": 2}}])
    assert resolve_deepspeed("examples_ds.json") == "examples_ds.json"
    with pytest.raises(ConfigError, match="deepspeed file 'examples/deepspeed/ds_z9.json' does not exist .* not one "
                                          "of LlamaFactory's bundled configs"):
        load_config(_yaml(tmp_path / "c.yaml", {**PAPER_SDAR, "deepspeed": "examples/deepspeed/ds_z9.json"}))


def test_our_deepspeed_paths_resolve_from_another_folder(tmp_path, monkeypatch):
    """sdar/configs/sft_example.yaml names sdar/configs/ds_z3.json; run from sdar/ (the paper's habit) it is
    found in the checkout."""
    from textwm.training.deepspeed_paths import repository_root, resolve_deepspeed

    monkeypatch.chdir(tmp_path)
    assert resolve_deepspeed("sdar/configs/ds_z3.json") == str(repository_root() / "sdar" / "configs" / "ds_z3.json")
    with pytest.raises(ConfigError, match="deepspeed"):
        resolve_deepspeed("sdar/configs/ds_z9.json")
