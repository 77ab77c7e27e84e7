"""One config base for the demo and the comparison: the shared settings declared once, each pipeline's defaults."""

from __future__ import annotations

import dataclasses

import pytest

from textwm.config import ConfigCLI, leaves, option
from textwm.demo import DemoConfig
from textwm.experiments.comparison_config import ComparisonConfig
from textwm.experiments.run_config import RunConfig, defaults


def test_both_configs_take_the_shared_settings_from_the_base_with_their_own_defaults():
    shared = [f.name for f in dataclasses.fields(RunConfig)]
    base_help = {leaf.key: leaf.help for leaf in leaves(RunConfig)}
    for cls in (DemoConfig, ComparisonConfig):
        assert issubclass(cls, RunConfig)
        assert [f.name for f in dataclasses.fields(cls)][:len(shared)] == shared
        helps = {leaf.key: leaf.help for leaf in leaves(cls)}
        assert {name: helps[name] for name in base_help} == base_help
    demo, comparison = DemoConfig(), ComparisonConfig()
    assert (demo.out, demo.size, demo.gen_length, demo.wm_port) == ("runs/demo", "tiny", 48, 30101)
    assert (comparison.out, comparison.size, comparison.gen_length, comparison.wm_port) == (
        "runs/wm_comparison", "qwen3-0.6b", 96, 30201)
    assert comparison.families == ("ar", "sdar", "wedlm") and demo.families == ("ar", "sdar")


def test_the_command_lines_show_each_pipelines_defaults_under_the_shared_help():
    demo = ConfigCLI(DemoConfig).parser.format_help()
    comparison = ConfigCLI(ComparisonConfig).parser.format_help()
    assert "--gen-length GEN_LENGTH\n" in demo and "(default: 48)" in demo and "(default: 96)" in comparison
    assert "--train-steps" in demo and "--train-steps" not in comparison and "--head-start" in comparison


def test_shared_settings_are_checked_once_by_name():
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        DemoConfig(workers=0)
    with pytest.raises(ValueError, match="eval_rows must be >= 1, got 0"):
        ComparisonConfig(eval_rows=0)
    assert DemoConfig(agent_sft_steps=0).agent_sft_steps == 0          # the demo's GRPO from the agent's start
    with pytest.raises(ValueError, match="agent_sft_steps must be >= 1, got 0"):
        ComparisonConfig(agent_sft_steps=0)


def test_defaults_names_only_inherited_fields_and_sits_under_dataclass():
    @dataclasses.dataclass(frozen=True)
    class Base:
        size: str = option("tiny", "shape")

    @dataclasses.dataclass(frozen=True)
    @defaults(size="big")
    class Child(Base):
        steps: int = option(1, "steps")

    assert Child().size == "big" and Base().size == "tiny"
    assert [(leaf.key, leaf.help) for leaf in leaves(Child)] == [("size", "shape"), ("steps", "steps")]
    with pytest.raises(TypeError, match="@defaults names no inherited field: steps"):
        @dataclasses.dataclass(frozen=True)
        @defaults(steps=2)
        class Other(Base):
            steps: int = option(1, "steps")
    with pytest.raises(TypeError, match="@defaults must sit under @dataclass"):
        defaults(size="big")(Child)
