"""The run scripts' values as data: every recipe under recipes/ loads into its launcher's config, names the commands
that run it in its header, and gives way to the environment and the flags."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from textwm.config import ConfigCLI
from textwm.rl.launch import GRPOConfig
from textwm.rl.sft_launch import AgentSFTConfig

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*/*.yaml"))


def config_of(recipe: Path) -> type:
    return AgentSFTConfig if "_sft" in recipe.stem else GRPOConfig


def test_there_is_a_recipe_for_every_env_and_stage():
    assert {(r.parent.name, "sft" if "_sft" in r.stem else "grpo") for r in RECIPES} == \
        {(env, stage) for env in ("alfworld", "sciworld", "appworld") for stage in ("sft", "grpo")}


@pytest.mark.parametrize("recipe", RECIPES, ids=[f"{r.parent.name}/{r.name}" for r in RECIPES])
def test_a_recipe_loads_and_its_header_names_the_commands_that_run_it(recipe, tmp_path, monkeypatch):
    for var in ("LR", "MODEL_PATH", "NUM_GPUS", "DEEPSPEED", "DATA", "RUN_NAME", "EPOCHS"):
        monkeypatch.delenv(var, raising=False)
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    config, _ = ConfigCLI(config_of(recipe), recipes=True).parse(["--recipe", str(recipe), "--data", str(data)])
    assert config.env == recipe.parent.name and config.model_path
    assert config.run_name or recipe.stem == "grpo"      # the env's generic GRPO defaults name no model
    relative = recipe.relative_to(ROOT).as_posix()
    commands = [line[2:] for line in recipe.read_text().splitlines()[:2]]
    module = "textwm.rl.sft_launch" if config_of(recipe) is AgentSFTConfig else "textwm.rl.launch"
    assert commands[1] == f"python -m {module} --recipe {relative}"
    script = re.fullmatch(r"bash (\S+\.sh)", commands[0])[1]
    assert relative in (ROOT / script).read_text()          # the launcher under the paper's name uses it


def test_the_environment_and_the_flags_override_a_recipe(tmp_path, monkeypatch):
    recipe = ROOT / "recipes" / "alfworld" / "qwen3_grpo.yaml"
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    cli = ConfigCLI(GRPOConfig, recipes=True)
    base, _ = cli.parse(["--recipe", str(recipe), "--data", str(data)])
    assert base.lr == 5e-7 and base.gpus_unset == 2
    monkeypatch.setenv("LR", "1e-6")
    from_env, _ = cli.parse(["--recipe", str(recipe), "--data", str(data)])
    assert from_env.lr == 1e-6
    from_flag, _ = cli.parse(["--recipe", str(recipe), "--data", str(data), "--lr", "2e-6"])
    assert from_flag.lr == 2e-6


def test_a_recipes_gpus_and_deepspeed_follow_the_papers_scripts(tmp_path, monkeypatch):
    """gpus_unset: the count when neither NUM_GPUS nor CUDA_VISIBLE_DEVICES says; deepspeed auto: ZeRO-2 on several."""
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    recipe = ROOT / "recipes" / "alfworld" / "qwen3_grpo.yaml"
    monkeypatch.delenv("NUM_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config, _ = ConfigCLI(GRPOConfig, recipes=True).parse(["--recipe", str(recipe), "--data", str(data)])
    assert (config.resolved().num_gpus, config.resolved().deepspeed) == (2, "zero2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert (config.resolved().num_gpus, config.resolved().deepspeed) == (1, "")
