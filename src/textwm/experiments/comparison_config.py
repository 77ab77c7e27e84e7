"""The comparison's settings (:class:`ComparisonConfig`) and how a resumed run treats a changed one.

Split from :mod:`textwm.experiments.wm_comparison`, which runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from textwm.config import option
from textwm.envs.registry import get_env
from textwm.experiments.common import FAMILIES, RANDOM_INIT_REGIMES, REGIMES
from textwm.experiments.run_config import RunConfig, defaults
from textwm.experiments.stages import Redo

#: Settings of Stage 2 alone: a change (or a run folder from before Stage 2) redoes Stage 2, not the world models.
STAGE2_SETTINGS = ("stage2", "agent_init", "agent_tasks", "agent_size", "agent_vocab_size", "agent_cutoff_len",
                   "agent_sft_steps", "agent_sft_checkpoints", "agent_target_success", "agent_learning_rate",
                   "grpo_families", "grpo_steps", "grpo_turns", "grpo_learning_rate", "grpo_generations",
                   "grpo_tasks_per_step", "grpo_dynamic_sample", "grpo_seeds", "grpo_completion_length",
                   "calibration_episodes", "calibration_every", "agent_episodes", "agent_turns", "workers")
#: Settings of the pretrained regime's stopping: a change keeps every epoch trained and decoded, and decides anew
#: where each arm stops (a run of a few epochs per GPU lease goes on with a larger max_epochs).
EPOCH_SETTINGS = ("max_epochs", "patience")
#: The name prefixes of Stage 2's stages.
STAGE2_STEPS = ("agent/", "fidelity/", "probes/", "grpo/", "calibration/")
#: The stage that checks the arms' training data (run on every run, after the arms are trained).
SAME_DATA = "checks/same_data"


def _decided_by_epochs(stage: str) -> bool:
    """The stages a new ``max_epochs`` or ``patience`` decides anew: where each pretrained arm stops (its train record),
    its best epoch's samples and its scores. Each epoch trained (``arms/<arm>/epochs.json``) and decoded is kept."""
    return (stage.startswith(("train/pretrained/", "eval/pretrained/"))
            or (stage.startswith("generate/pretrained/") and stage.endswith("/sampled")))


#: How a resumed comparison treats a changed setting beyond the run-only ones: a Stage-2 setting redoes Stage 2 and
#: keeps the world models; a pretrained-regime stopping setting keeps the epochs trained and decoded; any other
#: change is refused (:class:`~textwm.experiments.stages.StageRunner`).
RESUME_REDO = (
    Redo(EPOCH_SETTINGS, _decided_by_epochs, "{changes}: the epochs trained are kept; {stages} decided anew"),
    Redo(STAGE2_SETTINGS, lambda stage: stage.startswith(STAGE2_STEPS),
         "Stage 2 settings changed ({changes}): the world models are kept, Stage 2 is redone ({stages})"),
)


def from_old_state(old: dict[str, Any]) -> dict[str, Any]:
    """A comparison's ``state.json`` from before the one state format (``{"config", "done": {stage: record with its
    seconds}, "data_checks"}``), as :class:`~textwm.experiments.stages.StageRunner` reads it."""
    stages = {name: {"status": "done", "seconds": record.get("seconds") or 0.0, "result": record}
              for name, record in old["done"].items()}
    if "data_checks" in old:
        stages[SAME_DATA] = {"status": "done", "seconds": 0.0, "result": {"lines": old["data_checks"]}}
    return {"config": old["config"], "stages": stages}


# Defaults sized for one H200 (scripts/results/README.md): with --parallel 3, the scratch regime's three arms
# trained at once in 484 s and decoded in 533 s, ~18 min of GPU time; the convert regime is a part of its own.
@dataclass(frozen=True)
@defaults(out="runs/wm_comparison", families=FAMILIES, size="qwen3-0.6b", vocab_size=4096, learning_rate=3e-4,
          cutoff_len=1024, eval_rows=300, gen_length=96, denoising_steps=1, agent_sft_steps=300, grpo_steps=20,
          grpo_turns=8, agent_episodes=30, agent_turns=10, workers=4, wm_port=30201, proxy_port=30200)
class ComparisonConfig(RunConfig):
    """The comparison's settings: :class:`~textwm.experiments.run_config.RunConfig`'s with the comparison's defaults
    (one GPU), its regimes, arms and decodings, and Stage 2's agent and GRPO runs."""

    #: ``parallel`` changes the wall-clock seconds of training (recorded per arm), not the models: each arm's trainer
    #: is deterministic.
    RUN_ONLY_SETTINGS: ClassVar[tuple[str, ...]] = (*RunConfig.RUN_ONLY_SETTINGS, "parallel", "env_port")
    POSITIVE_SETTINGS: ClassVar[tuple[str, ...]] = (
        *RunConfig.POSITIVE_SETTINGS, "steps", "samples", "per_batch", "save_steps", "parallel", "agent_sft_steps",
        "grpo_generations", "grpo_completion_length", "grpo_tasks_per_step", "agent_sft_checkpoints",
        "calibration_every")

    data_dir: str = option("", "folder with wm_train.jsonl and wm_test.jsonl (default: the env's demo "
                               "dataset)")
    regimes: tuple[str, ...] = option(RANDOM_INIT_REGIMES, "scratch, convert (SDAR/WeDLM from an AR head "
                                                           "start), or pretrained (with --init)")
    init: str = option("", "the pretrained regime's start: a pretrained start's name (textwm models "
                           "pretrained --list) or an AR checkpoint folder")
    max_epochs: int = option(8, "pretrained regime: epochs at most")
    patience: int = option(1, "pretrained regime: epochs without a better held-out loss before an arm stops")
    #: Pretrained regime: SDAR's greedy decodings at each of these denoising steps per block (4 = one token a step).
    sdar_denoising_steps: tuple[int, ...] = option((4, 1), "pretrained regime: SDAR's greedy decodings at "
                                                           "each of these denoising steps per block")
    temperatures: tuple[float, ...] = option((0.3, 0.7, 1.0), "pretrained regime: the best epoch sampled at "
                                                              "each temperature")
    bootstrap: int = option(1000, "bootstrap resamples of the held-out rows for the 95% intervals on the "
                                  "scores (0: none)")
    steps: int = option(1000, "training steps of each arm")
    head_start: float = option(0.5, "convert regime: the AR head start's share of the steps")
    save_steps: int = option(250, "checkpoint every N steps")
    samples: int = option(4, "sampled decodings per prompt (diversity)")
    temperature: float = option(1.0, "sampling temperature of those decodings")
    per_batch: int = option(32, "prompts decoded together")
    #: Arms trained at once, each in its own process on the same device. Small models at these batch sizes
    #: leave a GPU idle between kernel launches, so two or three trainings share it at little cost each.
    #: Decoding stays one arm at a time: its tokens/s is a reported figure.
    parallel: int = option(1, "arms trained at once, each in its own process on the same device")
    # Stage 2 (textwm.experiments.comparison_agents): a small agent SFT'd on the gold demos, then GRPO inside the
    # world model of each of grpo_families, each agent scored in the real env.
    stage2: bool = option(True, "Stage 2 too: the agent SFT'd on the gold demos, GRPO inside each "
                                "--grpo-families world model, real-env runs")
    #: False: Stage 2 alone, with no world model trained (``grpo_families`` the real env only): the reference arm
    #: of GRPO in the real env, on a machine or in a lease of its own.
    stage1: bool = option(True, "the world models (--no-stage1: Stage 2 alone, with --stage2 "
                                "--grpo-families real)")
    agent_size: str = option("tiny", "the tiny random agent's size")
    agent_vocab_size: int = option(1024, "the tiny random agent's tokenizer")
    agent_cutoff_len: int = option(3072, "the agent's longest SFT row in tokens")
    #: > 1: the SFT agent is kept at this many evenly spaced steps and Stage 2 starts from the earliest whose
    #: success on the calibration rows reaches ``agent_target_success`` (an agent that leaves room to improve;
    #: the most successful one when none does). Needs ``calibration_episodes``.
    agent_sft_checkpoints: int = option(1, "> 1: SFT agents kept at this many evenly spaced steps; Stage 2 "
                                           "starts from the earliest that reaches --agent-target-success on "
                                           "the calibration rows")
    agent_target_success: float = option(0.2, "the calibration success an SFT agent must reach (with "
                                              "--agent-sft-checkpoints > 1)")
    grpo_families: tuple[str, ...] = option(("ar", "sdar"), "Stage 2's world models, and real: GRPO in the "
                                                            "real env, the upper reference")
    #: The H100 run's setting (scripts/results/README.md): the tiny agent's SFT runs at 3e-3, 300x large models'
    #: GRPO rate of 1e-5.
    grpo_learning_rate: float = option(1e-4, "GRPO learning rate")
    #: Rollouts per task row (GRPO's group) and the agent's tokens per reply in them (a gold action is <= ~25 words).
    grpo_generations: int = option(4, "rollouts per task row (GRPO's group)")
    #: Tasks (groups of ``grpo_generations`` rollouts) per optimizer step.
    grpo_tasks_per_step: int = option(1, "tasks (groups) per optimizer step")
    #: ms-swift's dynamic sampling: groups whose rollouts all got the same reward are regenerated (counted).
    grpo_dynamic_sample: bool = option(False, "regenerate groups whose rollouts all got one reward (counted)")
    #: One GRPO run per seed in each arm (its rollouts' sampling and data order); agents after the first seed's
    #: are named ``<agent>_seed<N>``.
    grpo_seeds: tuple[int, ...] = option((0,), "one GRPO run per seed in each arm")
    grpo_completion_length: int = option(48, "the agent's tokens per reply in the rollouts")
    #: N held-out task rows (a seeded sample) are the calibration set, kept out of the final real-env runs: the SFT
    #: stop (``agent_sft_checkpoints``) is chosen on them and each GRPO run's agents are run on them every
    #: ``calibration_every`` steps (a success curve over the run; nothing is chosen by it). 0: none.
    calibration_episodes: int = option(0, "held-out task rows kept out of the final real-env runs for the "
                                          "SFT stop and GRPO's success curve (0: none)")
    calibration_every: int = option(25, "GRPO steps between runs on the calibration rows")
    #: The real env server of Stage 2's ``real`` arm (GRPO with every rollout in the real env).
    env_port: int = option(30210, "the real env server's port (Stage 2's real arm)")

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [f for f in self.families if f not in FAMILIES] + [r for r in self.regimes if r not in REGIMES]
        if bad or not self.families or not self.regimes:
            raise ValueError(f"families come from {', '.join(FAMILIES)} and regimes from {', '.join(REGIMES)}; "
                             f"got families {' '.join(self.families) or '(none)'}, regimes "
                             f"{' '.join(self.regimes) or '(none)'}")
        if ("pretrained" in self.regimes) != bool(self.init) or (self.init and len(self.regimes) > 1):
            raise ValueError("the pretrained regime needs init (a pretrained start's name or an AR checkpoint), and "
                             f"init runs the pretrained regime alone; got regimes {' '.join(self.regimes)}, init "
                             f"{self.init or '(none)'}")
        if self.init and (not self.temperatures or min(self.temperatures) <= 0 or not self.sdar_denoising_steps
                          or min(self.sdar_denoising_steps) < 1 or self.max_epochs < 1 or self.patience < 1):
            raise ValueError("temperatures must be > 0, sdar_denoising_steps, max_epochs and patience >= 1")
        if not self.stage1 and not (self.stage2 and set(self.grpo_families) == {"real"}):
            raise ValueError("Stage 2 alone (stage1 off) trains no world model: it needs stage2 on and grpo_families "
                             f"real alone, got stage2 {self.stage2}, grpo_families {' '.join(self.grpo_families)}")
        if self.calibration_episodes < 0:
            raise ValueError(f"calibration_episodes must be >= 0, got {self.calibration_episodes}")
        if self.agent_sft_checkpoints > 1 and not self.calibration_episodes:
            raise ValueError("agent_sft_checkpoints > 1 picks the SFT stop on the calibration rows: set "
                             "calibration_episodes")
        if not self.grpo_seeds or len(set(self.grpo_seeds)) != len(self.grpo_seeds):
            raise ValueError(f"grpo_seeds must be distinct and at least one, got {self.grpo_seeds}")
        if not 0 <= self.agent_target_success <= 1:
            raise ValueError(f"agent_target_success must be in [0, 1], got {self.agent_target_success}")
        if self.stage2 and not set(self.grpo_families) <= {*self.families, "real"}:
            raise ValueError(f"grpo_families ({' '.join(self.grpo_families)}) must be among the families trained "
                             f"({' '.join(self.families)}), or real (GRPO in the real env)")
        if "convert" in self.regimes and not 0 < self.head_start < 1:
            raise ValueError(f"head_start must be in (0, 1) (the AR head start's share of the steps), "
                             f"got {self.head_start}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (the sampled decodings measure diversity), got {self.temperature}")

    @classmethod
    def create(cls, *, smoke: bool = False, **overrides: Any) -> ComparisonConfig:
        """The defaults (one H200; Stage 2 on the env builder's ``small_agent_tasks``), or with ``smoke`` a CPU
        setting of a few minutes (Stage 2 on every type of its small data); then ``overrides``."""

        builder = get_env(overrides.get("env", cls.env)).dataset_builder()
        settings: dict[str, Any] = {"agent_tasks": getattr(builder, "small_agent_tasks", ())}
        if overrides.get("init"):
            # A 135M start on one GPU: ~1,000 held-out rows (an interval of about +-0.03 on a rate near 0.5),
            # fine-tuning rate and batch of a model of that size. Stage 2 (opt-in, --stage2): the same start as the
            # agent, GRPO as one runs it on a pretrained agent (8 rollouts a task, 100 steps, a low rate), in the
            # real env and inside the AR and SDAR world models, scored on every held-out task row.
            settings.update(regimes=("pretrained",), stage2=False, batch_size=32, learning_rate=1e-4,
                            eval_rows=1000, per_batch=64, samples=2, agent_init=overrides["init"],
                            agent_learning_rate=2e-5, grpo_learning_rate=1e-6, grpo_generations=8, grpo_steps=100,
                            grpo_tasks_per_step=4, grpo_dynamic_sample=True, grpo_seeds=(0, 1),
                            grpo_families=("ar", "sdar", "real"), agent_episodes=200, calibration_episodes=30,
                            agent_sft_checkpoints=4)
        if smoke:
            settings = dict(smoke=True, size="tiny", vocab_size=1024, steps=40, batch_size=8, learning_rate=3e-3,
                            save_steps=20, eval_rows=12, gen_length=24, samples=2, denoising_steps=2, per_batch=16,
                            agent_sft_steps=20, agent_cutoff_len=1024, grpo_steps=1, grpo_generations=2,
                            grpo_completion_length=16, grpo_turns=3, agent_episodes=2, agent_turns=4,
                            workers=2, agent_tasks=())
            if overrides.get("init"):
                settings.update(regimes=("pretrained",), stage2=False, batch_size=4, learning_rate=1e-4,
                                eval_rows=8, max_epochs=2, temperatures=(0.7,), bootstrap=50, per_batch=8,
                                agent_init=overrides["init"], agent_learning_rate=1e-4, grpo_learning_rate=1e-5,
                                calibration_episodes=1, calibration_every=1, agent_sft_checkpoints=2)
        return cls(**{**settings, **overrides})

    @property
    def head_steps(self) -> int:
        return max(1, round(self.steps * self.head_start))
