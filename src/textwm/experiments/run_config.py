"""The settings the demo and the world-model comparison share (:class:`RunConfig`), declared once with their help;
:class:`~textwm.experiments.demo_config.DemoConfig` and :class:`~textwm.experiments.comparison_config.ComparisonConfig` derive from it
and set their own defaults with :func:`defaults`.

The defaults here are the demo's (a CPU run of minutes); the comparison's, sized for one GPU, are its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textwm.config import option


def defaults(**values: Any) -> Callable[[type], type]:
    """A class decorator (under ``@dataclass``) that gives fields of the base config other defaults in a subclass,
    keeping each field's help, flag and place: ``@dataclass(frozen=True) @defaults(size="qwen3-0.6b") class C(Base)``.

    Raises:
        TypeError: a name that is not a field of a base, or a class already made a dataclass (the decorator must sit
            under ``@dataclass``).
    """
    def apply(cls: type) -> type:
        if "__dataclass_fields__" in vars(cls):
            raise TypeError(f"{cls.__name__}: @defaults must sit under @dataclass")
        inherited = {f.name: f for f in dataclasses.fields(cls)}
        own = dict(vars(cls).get("__annotations__", {}))
        unknown = sorted(name for name in values if name not in inherited or name in own)
        if unknown:
            raise TypeError(f"{cls.__name__}: @defaults names no inherited field: {', '.join(unknown)}")
        for name, value in values.items():
            own[name] = inherited[name].type
            setattr(cls, name, dataclasses.field(default=value, metadata=inherited[name].metadata))
        cls.__annotations__ = own
        return cls
    return apply


@dataclass(frozen=True)
class RunConfig:
    """What a run of both stages is set by in either pipeline: its folder and env, the world models' shape and
    training, their decoding, the agent's SFT and GRPO, its real-env runs, the served stack's ports, the seed."""

    #: Settings that do not change what a run produces: a resume accepts other values (a subclass adds its own).
    RUN_ONLY_SETTINGS: ClassVar[tuple[str, ...]] = ("out", "wm_port", "proxy_port")
    #: Settings that must be >= 1 (a subclass adds its own).
    POSITIVE_SETTINGS: ClassVar[tuple[str, ...]] = ("vocab_size", "batch_size", "cutoff_len", "eval_rows", "gen_length",
                                                    "denoising_steps", "grpo_steps", "grpo_turns", "agent_episodes",
                                                    "agent_turns", "workers")

    out: str = option("runs/run", "run folder (state.json, report.md); a re-run resumes it, skipping the stages done")
    smoke: bool = option(False, "a CPU setting of a few minutes: tiny models, the env's smallest demo data (CI)")
    #: The env of the whole run: its demo dataset (unless the pipeline is given a data folder), the agent's tasks,
    #: the real-env runs.
    env: str = option("sciworld", "the env of the run: its demo dataset (unless a data folder is given), the "
                                  "agent's tasks, the real-env runs")
    families: tuple[str, ...] = option(("ar", "sdar"), "world-model families trained side by side on the same rows")
    #: Task types of the agent's stages (its demos, GRPO tasks and real-env rows; empty: every type of the data). The
    #: world models learn every type; a small agent finishes only short tasks in its turns (``create`` takes the env
    #: builder's ``small_agent_tasks``: ScienceWorld's lifespan pair, 1-7 gold actions, where boil takes 25-50).
    agent_tasks: tuple[str, ...] = option((), "task types of the agent's stages (its demos, GRPO tasks, real-env "
                                              "rows); none: every type of the data (default: the env's small-agent "
                                              "types)")
    size: str = option("tiny", "shape of the world models trained from random weights (textwm.models.tiny: tiny, "
                               "small, ..., qwen3-0.6b)")
    vocab_size: int = option(1024, "the tokenizer trained on the rows (world models from random weights)")
    batch_size: int = option(8, "training batch")
    learning_rate: float = option(3e-3, "world-model learning rate")
    cutoff_len: int = option(2048, "longest world-model training row in tokens (the paper's layout: 4096)")
    eval_rows: int = option(120, "held-out transitions decoded and scored")
    gen_length: int = option(48, "tokens per decoded answer at most")
    denoising_steps: int = option(2, "SDAR's denoising steps per block")
    #: The agent's start: a pretrained start's name (``python -m textwm.models.pretrained --list``) or an AR
    #: checkpoint; empty: a tiny random model whose tokenizer is trained on the agent's rows.
    agent_init: str = option("", "the agent's start: a pretrained start's name (textwm models pretrained --list) "
                                 "or an AR checkpoint (default: a tiny random agent; the comparison's with --init: that "
                                 "start)")
    agent_sft_steps: int = option(150, "the agent's SFT steps on the gold demos before GRPO (the demo's 0: "
                                       "GRPO from the agent's start as it is)")
    #: The agent SFT's learning rate (a tiny random agent learns at 3e-3; a pretrained one wants ~1e-4 or less).
    agent_learning_rate: float = option(3e-3, "the agent SFT's learning rate")
    grpo_steps: int = option(3, "GRPO steps")
    grpo_turns: int = option(4, "agent turns per GRPO rollout")
    #: Real-env episodes per agent: the first N held-out task rows (all of them when there are fewer).
    agent_episodes: int = option(6, "real-env episodes per agent evaluation (the first N held-out task rows)")
    agent_turns: int = option(8, "turns per agent episode")
    workers: int = option(2, "real env worker processes")
    wm_port: int = option(30101, "the world-model server's port (the stages that serve a world model)")
    proxy_port: int = option(30100, "the world-model proxy's port")
    seed: int = option(0, "seed of data, training and sampling")

    def __post_init__(self) -> None:
        for name in self.POSITIVE_SETTINGS:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.agent_sft_steps < 0:
            raise ValueError(f"agent_sft_steps must be >= 0, got {self.agent_sft_steps}")
