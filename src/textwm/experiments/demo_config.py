"""The demo's settings (:class:`DemoConfig`), beside the comparison's: the demo runs them
(:class:`textwm.demo.Demo`), and the comparison builds its default dataset with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from textwm.config import option
from textwm.envs.registry import get_env
from textwm.experiments.common import BLOCKS
from textwm.experiments.run_config import RunConfig, defaults

#: The demo's WM prompt layouts (:attr:`DemoConfig.prompt_style`).
DEMO_PROMPT_STYLES = ("compact", "full", "paper")


@dataclass(frozen=True)
@defaults(out="runs/demo")
class DemoConfig(RunConfig):
    """The demo's settings: :class:`~textwm.experiments.run_config.RunConfig`'s (its defaults are the demo's) and the
    demo's data build and world-model training."""

    RUN_ONLY_SETTINGS: ClassVar[tuple[str, ...]] = (*RunConfig.RUN_ONLY_SETTINGS, "workers")

    #: Task families (empty: the env builder's demo default).
    tasks: tuple[str, ...] = option((), "task types (default: the env's demo set; ScienceWorld: boil melt "
                                        "find-living-thing test-conductivity; ALFWorld: all six; AppWorld: "
                                        "all seven question kinds)")
    train_variations: int = option(3, "train variations per task")
    test_variations: int = option(1, "held-out variations per task")
    explore_steps: int = option(12, "exploration steps per episode beyond the gold run")
    #: The WM prompt layout: ``compact`` (tiny models learn it in CPU minutes; ALFWorld and AppWorld: their own
    #: layout), ``full`` (ScienceWorld's full sections, which need far more steps) or ``paper`` (every env: the
    #: paper's query, byte for byte; the simulator then queries in it too).
    prompt_style: str = option("compact", "WM prompt layout: compact (ALFWorld, AppWorld: their own), full "
                                          "(ScienceWorld's full sections) or paper (the paper's query, "
                                          "every env)")
    train_steps: int = option(1200, "world-model training steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        builder = get_env(self.env).dataset_builder()
        if builder is None or not hasattr(builder, "demo_config"):
            raise ValueError(f"env {self.env!r} has no demo (its dataset builder has no demo_config)")
        if self.train_steps < 1:
            raise ValueError(f"train_steps must be >= 1, got {self.train_steps}")
        if self.tasks and not set(self.agent_tasks) <= set(self.tasks):
            raise ValueError(f"agent_tasks {' '.join(sorted(set(self.agent_tasks) - set(self.tasks)))} not among "
                             f"tasks ({' '.join(self.tasks)})")
        if self.prompt_style not in DEMO_PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {', '.join(DEMO_PROMPT_STYLES)}, got {self.prompt_style!r}")
        unknown = sorted(set(self.families) - set(BLOCKS))
        if unknown or "sdar" not in self.families:
            raise ValueError(f"families must include sdar (the GRPO stage serves it) and come from "
                             f"{', '.join(BLOCKS)}; got {' '.join(self.families)}")

    @classmethod
    def create(cls, *, smoke: bool = False, **overrides: Any) -> DemoConfig:
        """The demo of ``overrides["env"]`` (default sciworld): the env builder's ``small_agent_tasks`` as the agent's
        and its ``demo_defaults`` (its scale: an ALFWorld WM prompt is ~3x a compact ScienceWorld one, so it trains
        fewer steps in the same minutes), then the smoke setting if asked (and the builder's ``demo_smoke``), then
        ``overrides``. Other ``tasks`` without ``agent_tasks`` give the agent every type of them."""
        env = overrides.get("env", "sciworld")
        builder = get_env(env).dataset_builder()
        settings = {"agent_tasks": getattr(builder, "small_agent_tasks", ()), **getattr(builder, "demo_defaults", {})}
        if smoke:
            settings.update(smoke=True, tasks=(), agent_tasks=(), train_variations=1, test_variations=1,
                            explore_steps=6, train_steps=40, eval_rows=16, gen_length=24, agent_sft_steps=10,
                            grpo_steps=1, grpo_turns=3, agent_episodes=2, agent_turns=4)
            settings.update(getattr(builder, "demo_smoke", {}))
        if "tasks" in overrides and "agent_tasks" not in overrides:
            settings["agent_tasks"] = ()
        return cls(**{**settings, **overrides})

    @classmethod
    def smoke_test(cls, **overrides: Any) -> DemoConfig:
        """An even smaller setting for CI (a few minutes)."""
        return cls.create(smoke=True, **overrides)
