"""AR vs SDAR vs WeDLM world models on the same rows, in three regimes: from scratch, an AR head start converted,
and a pretrained start converted (Stage 1; Stage 2 is :mod:`textwm.experiments.comparison_agents`).

The question is the paper's: does a masked-diffusion world model beat an AR one of the same size on
held-out transitions? In the two random-init regimes every arm starts from the same random
initialisation shape and one tokenizer (trained on the rows, with the mask token, so every arm has the
same parameter count) and trains on the same rows in the same order for the same number of steps:

- ``scratch``: each family from its random init for ``steps``;
- ``pretrained`` (with ``init``, a pretrained start's name or an AR checkpoint): the paper's recipe at a size one
  GPU runs. The AR arm is fine-tuned from the start, the SDAR and WeDLM arms are converted from it and fine-tuned,
  epoch by epoch until the held-out loss stops improving (:mod:`textwm.experiments.pretrained_regime`);
- ``convert``: the SDAR / WeDLM recipe from random weights. An AR model trains for ``head_start`` x ``steps`` (the arm
  ``convert/ar_head``), then the trainer converts it to each family (the project's AR -> SDAR / WeDLM
  conversion, announced in its log) and trains the rest of the steps; the AR arm continues AR training
  from the same checkpoint for the same steps. Each continuation is a new trainer run: a fresh cosine
  schedule, and the rows again in the same order from the start (so the rest of the steps revisit the rows
  the head start saw first, for every family alike).

Each arm is then scored on held-out transitions: greedy decoding for exact match, ROUGE-L, BLEU-1,
MAUVE and the corpus Self-BLEU / Distinct-n of the scorer; ``samples`` decodings per prompt at
``temperature`` for the within-prompt diversity (Self-BLEU among a prompt's samples, mean over prompts;
Distinct-1/2 over all samples); decode tokens/s. The data each arm trained on is checked, not assumed:
the trainer's digest of the answer tokens in training order (``TrainResult.data_digest``) must be equal
within a regime, or the run stops naming the arms.

Every stage (``data``, ``init``, ``train/<arm>``, ``checks/same_data``, ``generate/<arm>``, ``eval/<arm>``, then
Stage 2's) runs through :class:`~textwm.experiments.stages.StageRunner`, recorded in ``<out>/state.json``; an arm cut
short resumes from its last checkpoint, and a changed setting is refused (``--fresh`` starts over) but for Stage 2's
and the pretrained regime's stopping ones, which run again only what they change
(:data:`~textwm.experiments.comparison_config.RESUME_REDO`). With ``parallel`` > 1, arms whose start is trained
train at once, one process each. Stage 2 (an SFT agent, GRPO inside each
family's world model, real-env success before and after) is :mod:`textwm.experiments.comparison_agents`.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import config_dict
from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.envs.build import build
from textwm.envs.registry import get_env
from textwm.experiments import pretrained_regime
from textwm.experiments.common import (
    AGENT_FILES,
    BLOCKS,
    FAMILIES,
    REGIMES,
    ComparisonError,
)
from textwm.experiments.comparison_agents import run_stage2
from textwm.experiments.comparison_config import (
    RESUME_REDO,
    SAME_DATA,
    STAGE2_SETTINGS,
    ComparisonConfig,
    from_old_state,
)
from textwm.experiments.comparison_report import write_report
from textwm.experiments.decodings import empty_share, sampled_decode_rate, sampled_diversity
from textwm.experiments.demo_config import DemoConfig
from textwm.experiments.same_data import check_same_data, check_same_epochs
from textwm.experiments.stages import STATE_FILE, Legacy, Stage, StageRunner
from textwm.generation.runner import EvalGenerateConfig, run_passes
from textwm.generation.settings import DecodeSettings
from textwm.metrics.scorer import ScoreOptions, score_file
from textwm.models.tiny import build_tiny_model, chat_texts, save_checkpoint, train_tokenizer
from textwm.training.config import SFTConfig

__all__ = ["AGENT_FILES", "BLOCKS", "FAMILIES", "REGIMES", "STAGE2_SETTINGS", "Arm", "Comparison",
           "ComparisonConfig", "ComparisonError", "plan_arms"]

log = logging.getLogger(__name__)

#: Each arm's training record, beside its checkpoints (what ``state.json`` gets once the arm is done).
ARM_RECORD = "train_record.json"
#: Where :meth:`Comparison.run` may stop.
UNTIL = ("train", "generate", "agents", "scores", "report")


@dataclass(frozen=True)
class Arm:
    """One trained world model: ``family`` trained ``steps`` from ``start`` ("init" or another arm's name)."""

    name: str
    regime: str
    family: str
    start: str
    steps: int

    @property
    def folder(self) -> str:
        return self.name.replace("/", "_")

    @property
    def scored(self) -> bool:
        return not self.name.endswith("_head")


def plan_arms(config: ComparisonConfig) -> list[Arm]:
    """The arms in training order (a ``convert`` head start before the arms that continue from it)."""
    arms = []
    if "pretrained" in config.regimes:     # epochs decide how far each arm trains, not steps
        arms += [Arm(f"pretrained/{f}", "pretrained", f, "init", 0) for f in config.families]
    if "scratch" in config.regimes:
        arms += [Arm(f"scratch/{f}", "scratch", f, "init", config.steps) for f in config.families]
    if "convert" in config.regimes:
        head = Arm("convert/ar_head", "convert", "ar", "init", config.head_steps)
        rest = config.steps - head.steps
        if rest < 1:
            raise ValueError(f"steps {config.steps} x head_start {config.head_start} leaves no steps after the head start")
        arms += [head] + [Arm(f"convert/{f}", "convert", f, head.name, rest) for f in config.families]
    return arms


class Comparison:
    """Runs the stages of :class:`ComparisonConfig` under ``config.out``; each finished stage is recorded in its
    ``state.json`` (:class:`~textwm.experiments.stages.StageRunner`)."""

    def __init__(self, config: ComparisonConfig, *, fresh: bool = False, echo: Callable[[str], None] = print):
        self.config, self.echo = config, echo
        self.out = Path(config.out)
        self.runner = StageRunner(self.out, pipeline="comparison", config=config_dict(config),
                                  ignore=config.RUN_ONLY_SETTINGS, redo=RESUME_REDO,
                                  legacy=Legacy(STATE_FILE, from_old_state), fresh=fresh, echo=echo)
        self.state_file = self.runner.state_file
        self.arms = plan_arms(config)

    @property
    def done(self) -> dict[str, dict[str, Any]]:
        """The result of every stage done, by stage name (``train/scratch/ar``, ``agent/eval/sft``, ...)."""
        return self.runner.results

    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def run(self, *, until: str = "report") -> Path | None:
        """Every stage up to ``until``: ``train`` stops once every arm is trained; ``generate`` once every arm
        has decoded the held-out rows; ``agents`` once Stage 2 is done too, before any scoring (every stage
        that needs the world models, so all of a GPU machine's work); ``report`` goes to the end. After
        ``generate`` or ``agents`` the scoring and report run anywhere the run folder's ``state.json``, ``data/``
        and ``eval/`` are (a CPU machine with the metrics extras, say), with the same command without ``until``;
        ``scores`` scores and reports without doing any Stage-2 stage (the report shows those done and names the
        rest), for a machine that does not hold the world models."""
        if until not in UNTIL:
            raise ValueError(f"until must be one of {', '.join(UNTIL)}, got {until!r}")
        self.runner.run_stage(Stage("data", self.stage_data))
        if not self.config.stage1:
            return self._stage2_alone(until)
        self.runner.run_stage(Stage("init", self.stage_init, after=("data",)))
        self.train_all()
        self.runner.run_stage(Stage(SAME_DATA, self.check_same_data, after=tuple(f"train/{a.name}" for a in self.arms),
                                    always=True))
        if until == "train":
            self.echo("every arm is trained; decode, score and report with the same command without --until")
            return None
        scored = [a for a in self.arms if a.scored]
        self.runner.run([stage for arm in scored for stage in self.generate_stages(arm)])
        if until in ("generate", "agents"):
            if until == "agents" and self.config.stage2:
                run_stage2(self)
            self.echo(f"every arm has decoded{' and Stage 2 is done' if until == 'agents' else ''}; score and "
                      f"report with the same command without --until: {self.path('eval')}, {self.path('data')} and "
                      f"{self.state_file} are all it needs")
            return None
        self.runner.run([Stage(f"eval/{arm.name}", lambda arm=arm: self.score_arm(arm),
                               after=(f"generate/{arm.name}" if arm.regime != "pretrained" else
                                      f"generate/{arm.name}/sampled",)) for arm in scored])

        report = write_report(self)     # the world models' report first: a Stage-2 failure does not lose it
        if self.config.stage2 and until == "scores":
            self.echo(f"scored; no Stage-2 stage was run (--until scores), the report shows those done earlier: "
                      f"{report}")
            return report
        if self.config.stage2:
            self.echo(f"world models' report: {report}; Stage 2 ...")
            run_stage2(self)
            report = write_report(self)
        self.echo(f"comparison finished: {report}")
        return report

    def _stage2_alone(self, until: str) -> Path | None:
        """``run`` with ``stage1`` off: Stage 2's stages (``agents``, ``report``), then the report (``report``,
        ``scores``)."""

        if until in ("agents", "report"):
            run_stage2(self)
        if until in ("train", "generate", "agents"):
            self.echo(f"Stage 2 alone: report with the same command without --until ({self.state_file})")
            return None
        report = write_report(self)
        self.echo(f"Stage 2 report: {report}")
        return report

    def check_same_data(self) -> dict[str, Any]:
        """The arms of a regime trained on the same answer tokens in the same order (every epoch, in the pretrained
        regime): one line per group; :class:`ComparisonError` naming the arms that differ."""
        trained = {a.name: self.done[f"train/{a.name}"] for a in self.arms}
        lines = check_same_data(trained, self.arms)
        if self.config.init:
            lines += check_same_epochs(trained)
        return {"lines": lines}

    # --- data and the shared initialisation -----------------------------------------------------------

    def stage_data(self) -> dict[str, Any]:
        c = self.config
        data = self.path("data")
        data.mkdir(exist_ok=True)
        if c.data_dir and not c.stage1:      # Stage 2 alone: the agent's files, no world-model rows
            source = Path(c.data_dir)
            for name in AGENT_FILES:
                if not (source / name).is_file():
                    raise ComparisonError(f"--data-dir {source} has no {name}, which Stage 2 needs (the env's "
                                          "dataset builder writes it)")
                shutil.copyfile(source / name, data / name)
            return {"train_rows": 0, "eval_rows": 0, "source": c.data_dir}
        if c.data_dir:
            source = Path(c.data_dir)
            for name in ("wm_train.jsonl", "wm_test.jsonl"):
                if not (source / name).is_file():
                    raise ComparisonError(f"--data-dir {source} has no {name} (build it with sciworld/build_wm_dataset.py "
                                          "--out-dir DIR, or leave --data-dir out for the env's demo dataset)")
            shutil.copyfile(source / "wm_train.jsonl", data / "wm_train.jsonl")
            if c.stage2:     # Stage 2's task rows and gold demos (the env builder writes them beside the WM rows)
                for name in AGENT_FILES:
                    if not (source / name).is_file():
                        raise ComparisonError(f"--data-dir {source} has no {name}, which Stage 2 needs (the env's "
                                              "dataset builder writes it; or pass --no-stage2)")
                    shutil.copyfile(source / name, data / name)
            test = read_jsonl(source / "wm_test.jsonl").rows
        else:
            demo = DemoConfig.create(smoke=c.smoke, env=c.env, out=str(self.path("demo_settings")), seed=c.seed)
            build(c.env, get_env(c.env).dataset_builder().demo_config(data, demo))
            test = read_jsonl(data / "wm_test.jsonl").rows
        if c.stage2 and not read_jsonl(data / "sft_train.jsonl", allow_empty=True).rows:
            raise ComparisonError(f"{data / 'sft_train.jsonl'} has no gold demos: Stage 2's agent is trained on them "
                                  "(pass --no-stage2 to compare the world models alone)")
        rows = random.Random(c.seed).sample(test, min(c.eval_rows, len(test)))   # a fixed sample of held-out rows
        write_jsonl(data / "eval_test.jsonl", rows)
        train_rows = len(read_jsonl(data / "wm_train.jsonl").rows)
        return {"train_rows": train_rows, "eval_rows": len(rows), "source": c.data_dir or f"{c.env} demo dataset"}

    def stage_init(self) -> dict[str, Any]:
        """The pretrained start (resolved, :func:`textwm.experiments.pretrained_regime.start_record`); or one tokenizer (with the mask token, for every family: equal vocabularies and parameter counts) and
        one random initialisation per family from the same seed."""

        c = self.config
        if c.init:
            return pretrained_regime.start_record(self)
        rows = read_jsonl(self.path("data", "wm_train.jsonl")).rows
        tokenizer = train_tokenizer(chat_texts(rows), vocab_size=c.vocab_size, with_mask_token=True)
        params = {}
        for family in c.families:
            model = build_tiny_model(tokenizer, family=family, size=c.size, block_size=BLOCKS[family], seed=c.seed)
            save_checkpoint(model, tokenizer, self.path("init", family))
            params[family] = sum(p.numel() for p in model.parameters())
        if len(set(params.values())) != 1:
            raise ComparisonError(f"the families' initialisations differ in size: {params}")
        return {"parameters": params[c.families[0]], "vocabulary": len(tokenizer)}

    # --- training --------------------------------------------------------------------------------------

    def start_path(self, arm: Arm) -> Path:
        if arm.start == "init":
            return self.path("init", arm.family)
        return self.path("arms", arm.start.replace("/", "_"), "final")

    def train_stage(self, arm: Arm) -> Stage:
        """``train/<arm>``: the arm trained alone (:meth:`train_arm`), after the stage its start comes from."""
        return Stage(f"train/{arm.name}", lambda: {**self.train_arm(arm), "concurrent_arms": 1},
                     after=("init",) if arm.start == "init" else (f"train/{arm.start}",))

    def train_all(self) -> None:
        """Every arm, in waves of up to ``parallel`` arms whose start is trained (one process per arm)."""
        def done(arm: Arm) -> bool:
            return self.runner.is_done(f"train/{arm.name}")

        for arm in filter(done, self.arms):
            self.runner.run_stage(self.train_stage(arm))      # said to be done earlier, skipped
        while todo := [a for a in self.arms if not done(a)]:
            ready = [a for a in todo if a.start == "init" or self.runner.is_done(f"train/{a.start}")]
            wave = ready[:self.config.parallel]
            if len(wave) == 1:
                self.runner.run_stage(self.train_stage(wave[0]))
            else:
                self._train_concurrently(wave)

    def _train_concurrently(self, wave: list[Arm]) -> None:
        """The arms of ``wave`` trained at once, one spawned process each (:func:`_train_in_child`); each arm's stage is
        recorded as it ends (done from the record it wrote, or failed with its exit code)."""

        # spawn: a forked child of a process that touched CUDA cannot use it.
        context = multiprocessing.get_context("spawn")
        jobs = []
        # A SIGTERM to this process (a job's limit, `timeout`) must not leave the trainers running: a rerun would
        # start new ones writing the same checkpoints. It becomes SystemExit, and `finally` stops the children.
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        started = time.perf_counter()
        try:
            for arm in wave:
                process = context.Process(target=_train_in_child, args=(self.config, arm), name=f"train/{arm.name}")
                process.start()
                jobs.append((arm, process))
            self.echo(f"{', '.join(f'train/{a.name}' for a in wave)}: training at once ...")
            failed = []
            for arm, process in jobs:
                process.join()
                record = self.path("arms", arm.folder, ARM_RECORD)
                if process.exitcode != 0 or not record.is_file():
                    error = f"exit code {process.exitcode}; its traceback is in the log above"
                    self.runner.record_failure(f"train/{arm.name}", error, time.perf_counter() - started)
                    failed.append(f"train/{arm.name} ({error})")
                    continue
                result = {**json.loads(record.read_text()), "concurrent_arms": len(wave)}
                # What finished is kept even if a sibling failed.
                self.runner.record(f"train/{arm.name}", result, result["seconds"])
                self.echo(f"train/{arm.name}: {result['seconds']:.0f} s (wall clock, {len(wave)} arms at once)")
        finally:
            for _, process in jobs:
                if process.is_alive():
                    process.terminate()
                    process.join(30)
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if failed:
            raise ComparisonError(f"training failed: {'; '.join(failed)}. A rerun resumes each from its last "
                                  "checkpoint")

    def train_arm(self, arm: Arm) -> dict[str, Any]:
        """Train ``arm`` (or resume it), write its record beside its checkpoints and return it. An arm whose
        record and final model exist is not trained again: it finished in a run that stopped before recording
        it (a resumed trainer would run no steps and report a loss of 0)."""
        record = self.path("arms", arm.folder, ARM_RECORD)
        if record.is_file() and self.path("arms", arm.folder, "final").is_dir():
            self.echo(f"train/{arm.name}: finished earlier, its record is {record}")
            return json.loads(record.read_text())
        started = time.perf_counter()
        result = {**self._train(arm), "seconds": None}
        result["seconds"] = round(time.perf_counter() - started, 1)
        write_json(record, result)
        return result

    def _train(self, arm: Arm) -> dict[str, Any]:
        if arm.regime == "pretrained":
            return pretrained_regime.train_by_epochs(self, arm)
        # heavy: loads torch
        import torch

        # heavy: loads torch and transformers
        from textwm.training.trainer import train

        c = self.config
        cuda = torch.cuda.is_available()
        # The GPU's fast path: the same losses, about twice the tokens/s.
        fast = dict(bf16=True, loss_impl="chunked", optim="adamw_torch_fused", torch_compile=True) if cuda else {}
        # Arms trained at once share the GPU: each trainer's memory check holds it to its share, so a wave that
        # cannot fit stops before its first step with what to change, not out of memory in the middle.
        fast["memory_share"] = 1 / c.parallel
        result = train(SFTConfig(
            model_name_or_path=str(self.start_path(arm)), objective=arm.family,
            train_file=str(self.path("data", "wm_train.jsonl")), output_dir=str(self.path("arms", arm.folder)),
            final_dir="final", cutoff_len=c.cutoff_len, truncate_mode="cut", neat_packing=False,
            learning_rate=c.learning_rate, per_device_train_batch_size=c.batch_size, max_steps=arm.steps,
            lr_scheduler_type="cosine", warmup_ratio=0.05, logging_steps=max(1, arm.steps // 20),
            save_steps=c.save_steps, save_total_limit=1,
            # An arm cut short continues from its last checkpoint.
            resume_from_checkpoint=True if any(self.path("arms", arm.folder).glob("checkpoint-*")) else None,
            block_length=BLOCKS[arm.family], seed=c.seed, **fast))
        # The trainer's log history is restored on a resume, so the curve (and its mean) covers every step; the
        # trainer's own train_loss covers the steps of its last run only.
        curve = [(h["step"], h["loss"]) for h in result.log_history if "loss" in h and "step" in h]
        mean = sum(loss for _, loss in curve) / len(curve) if curve else result.train_loss
        return {"steps": result.global_step, "train_loss": round(mean, 4),
                "last_run_train_loss": round(result.train_loss, 4),
                "tokens_seen": result.tokens_seen, "answer_tokens_seen": result.answer_tokens_seen,
                "data_digest": result.data_digest, "loss_curve": curve,
                "train_samples_per_second": result.metrics.get("train_samples_per_second")}

    # --- evaluation ------------------------------------------------------------------------------------

    def generate_stages(self, arm: Arm) -> list[Stage]:
        """The decoding stages of a scored arm: ``generate/<arm>`` (:meth:`generate_arm`), or in the pretrained regime
        one per trained epoch and the best epoch's samples (:func:`pretrained_regime.generate_stages`)."""
        if arm.regime == "pretrained":
            return pretrained_regime.generate_stages(self, arm)
        return [Stage(f"generate/{arm.name}", lambda: self.generate_arm(arm), after=(f"train/{arm.name}",))]

    def generate_arm(self, arm: Arm) -> dict[str, Any]:
        """Greedy and ``samples`` sampled decodings of the held-out rows (GPU work; no scoring), one model load
        for all of them (:func:`textwm.generation.runner.run_passes`)."""
        # heavy: loads torch
        import torch

        c = self.config
        folder = self.path("eval", arm.folder)
        shutil.rmtree(folder, ignore_errors=True)      # a decoding cut short is redone whole
        passes = [("greedy", 0.0, None)] + [(f"sample_{k}", c.temperature, c.seed + k) for k in range(c.samples)]
        run_passes([EvalGenerateConfig(
            model_path=str(self.path("arms", arm.folder, "final")), data_dir=str(self.path("data")),
            datasets=["test"], output_dir=str(folder / name), num_gpus=1 if torch.cuda.is_available() else 0,
            per_batch=c.per_batch, decode=DecodeSettings(gen_length=c.gen_length, block_length=BLOCKS["sdar"],
                                                         denoising_steps=c.denoising_steps, temperature=temperature,
                                                         seed=seed))
            for name, temperature, seed in passes])
        greedy = json.loads((folder / "greedy" / "eval_generate_config.json").read_text())
        # The decoding loop's rate (the decoder's speed), and the whole call's (worker start, model load and every
        # pass, greedy and sampled).
        return {"decode_tokens_per_second": greedy["decode_tokens_per_second"],
                "decode_seconds": greedy["decode_seconds"], "call_tokens_per_second": greedy["tokens_per_second"],
                "call_seconds": greedy["seconds"], "call_passes": greedy["passes"],
                "generated_tokens": greedy["generated_tokens"]}

    def score_arm(self, arm: Arm) -> dict[str, Any]:
        """The scorer on the greedy outputs, the sampled outputs' diversity, the share of empty outputs."""

        if arm.regime == "pretrained":
            return pretrained_regime.score_arm(self, arm)

        c = self.config
        folder = self.path("eval", arm.folder)
        scores = score_file("test", folder / "greedy" / "test_outputs.jsonl", folder / "greedy",
                            ScoreOptions(mauve_max_samples=c.eval_rows))
        diversity = sampled_diversity([folder / f"sample_{k}" / "test_outputs.jsonl" for k in range(c.samples)])
        return {"scores": scores, "diversity": diversity, **self.done[f"generate/{arm.name}"],
                "sampled_decode_tokens_per_second": sampled_decode_rate([folder / f"sample_{k}" for k in range(c.samples)]),
                "empty_share": empty_share(folder / "greedy" / "test_outputs.jsonl")}


def _train_in_child(config: ComparisonConfig, arm: Arm) -> None:
    """One arm's training in its own process (:meth:`Comparison.train_all` with ``parallel`` > 1); its record
    (``arms/<arm>/train_record.json``) is what the parent adds to ``state.json``."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {arm.name} %(levelname)s %(name)s: %(message)s")
    Comparison(config, echo=lambda line: log.info("%s", line)).train_arm(arm)
