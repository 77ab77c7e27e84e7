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

Every stage is resumable: finished arms are recorded in ``<out>/state.json``, an arm cut short resumes
from its last checkpoint, and a changed setting is refused (``--fresh`` starts over). With ``parallel`` > 1,
arms whose start is trained train at once, one process each. Stage 2 (an SFT agent, GRPO inside each
family's world model, real-env success before and after) is :mod:`textwm.experiments.comparison_agents`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.experiments.common import (
    AGENT_FILES,
    BLOCKS,
    FAMILIES,
    REGIMES,
    ComparisonError,
)
from textwm.experiments.comparison_agents import run_stage2
from textwm.experiments.comparison_config import (
    EPOCH_SETTINGS,
    STAGE2_SETTINGS,
    STAGE2_STEPS,
    ComparisonConfig,
)
from textwm.experiments.comparison_report import write_report
from textwm.experiments.decodings import empty_share, sampled_decode_rate, sampled_diversity
from textwm.experiments.same_data import check_same_data, check_same_epochs
from textwm.generation.runner import EvalGenerateConfig, run_passes
from textwm.generation.settings import DecodeSettings
from textwm.metrics.scorer import ScoreOptions, score_file
from textwm.training.config import SFTConfig

__all__ = ["AGENT_FILES", "BLOCKS", "FAMILIES", "REGIMES", "Arm", "Comparison", "ComparisonConfig",
           "ComparisonError", "plan_arms"]

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
    """Runs the stages of :class:`ComparisonConfig` under ``config.out``; each finished step is recorded."""

    def __init__(self, config: ComparisonConfig, *, fresh: bool = False, echo: Callable[[str], None] = print):
        self.config, self.echo = config, echo
        self.out = Path(config.out)
        if fresh and self.out.exists():
            # Only a folder this module made (or an empty one): --fresh --out . must not delete a checkout.
            if not (self.out / "state.json").is_file() and any(self.out.iterdir()):
                raise ComparisonError(f"--fresh: {self.out} is not a comparison run folder (no state.json) and not "
                                      "empty; not deleting it")
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.state_file = self.out / "state.json"
        self.settings = json.loads(json.dumps({k: v for k, v in dataclasses.asdict(config).items()
                                               if k not in config.RUN_ONLY_SETTINGS}))
        self.state: dict[str, Any] = {"config": self.settings, "done": {}}
        if self.state_file.exists():
            saved = json.loads(self.state_file.read_text())
            changed = {k: f"{k}: {saved['config'].get(k)!r} -> {v!r}" for k, v in self.settings.items()
                       if saved["config"].get(k) != v}
            if set(changed) - set(STAGE2_SETTINGS) - set(EPOCH_SETTINGS):
                raise ValueError(f"{self.out} holds a comparison with other settings ({', '.join(changed.values())}); "
                                 "use --fresh or another --out")
            epochs_changed = [changed[k] for k in EPOCH_SETTINGS if k in changed]
            if epochs_changed:
                # Each arm's epochs stay (arms/<arm>/epochs.json, every epoch's model and decoding); where it stops,
                # its best epoch's samples and its scores are decided anew.
                redone = [k for k in saved["done"] if k.startswith(("train/pretrained/", "eval/pretrained/"))
                          or (k.startswith("generate/pretrained/") and k.endswith("/sampled"))]
                echo(f"{', '.join(epochs_changed)}: the epochs trained are kept; {', '.join(redone) or 'nothing'} "
                     "decided anew")
                saved["done"] = {k: v for k, v in saved["done"].items() if k not in redone}
                saved["config"] = {**saved["config"], **{k: self.settings[k] for k in EPOCH_SETTINGS}}
                changed = {k: v for k, v in changed.items() if k not in EPOCH_SETTINGS}
            if changed:
                redone = [k for k in saved["done"] if k.startswith(STAGE2_STEPS)]
                echo(f"Stage 2 settings changed ({', '.join(changed.values())}): the world models are kept, "
                     f"Stage 2 is redone{' (' + ', '.join(redone) + ')' if redone else ''}")
                saved["done"] = {k: v for k, v in saved["done"].items() if k not in redone}
                saved["config"] = self.settings
            self.state = saved
        self.arms = plan_arms(config)

    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def _step(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key in self.state["done"]:
            self.echo(f"{key}: done earlier, skipped")
            return self.state["done"][key]
        self.echo(f"{key} ...")
        started = time.perf_counter()
        record = work()
        record["seconds"] = round(time.perf_counter() - started, 1)
        self.state["done"][key] = record
        write_json(self.state_file, self.state)
        self.echo(f"{key}: {record['seconds']:.0f} s")
        return record

    def run(self, *, until: str = "report") -> Path | None:
        """Every step up to ``until``: ``train`` stops once every arm is trained; ``generate`` once every arm
        has decoded the held-out rows; ``agents`` once Stage 2 is done too, before any scoring (every step
        that needs the world models, so all of a GPU machine's work); ``report`` goes to the end. After
        ``generate`` or ``agents`` the scoring and report run anywhere the run folder's ``state.json``, ``data/``
        and ``eval/`` are (a CPU machine with the metrics extras, say), with the same command without ``until``;
        ``scores`` scores and reports without doing any Stage-2 step (the report shows those done and names the
        rest), for a machine that does not hold the world models."""
        if until not in UNTIL:
            raise ValueError(f"until must be one of {', '.join(UNTIL)}, got {until!r}")
        self._step("data", self.stage_data)
        if not self.config.stage1:
            return self._stage2_alone(until)
        self._step("init", self.stage_init)
        self.train_all()
        trained = {a.name: self.state["done"][f"train/{a.name}"] for a in self.arms}
        self.state["data_checks"] = check_same_data(trained, self.arms)
        if self.config.init:
            self.state["data_checks"] += check_same_epochs(trained)
        write_json(self.state_file, self.state)
        if until == "train":
            self.echo("every arm is trained; decode, score and report with the same command without --until")
            return None
        scored = [a for a in self.arms if a.scored]
        for arm in scored:
            if arm.regime == "pretrained":
                from textwm.experiments import pretrained_regime

                pretrained_regime.generate_arm(self, arm)
                continue
            self._step(f"generate/{arm.name}", lambda arm=arm: self.generate_arm(arm))
        if until in ("generate", "agents"):
            if until == "agents" and self.config.stage2:
                from textwm.experiments.comparison_agents import run_stage2

                run_stage2(self)
            self.echo(f"every arm has decoded{' and Stage 2 is done' if until == 'agents' else ''}; score and "
                      f"report with the same command without --until: {self.path('eval')}, {self.path('data')} and "
                      f"{self.state_file} are all it needs")
            return None
        for arm in scored:
            self._step(f"eval/{arm.name}", lambda arm=arm: self.score_arm(arm))

        report = write_report(self)     # the world models' report first: a Stage-2 failure does not lose it
        if self.config.stage2 and until == "scores":
            self.echo(f"scored; no Stage-2 step was run (--until scores), the report shows those done earlier: {report}")
            return report
        if self.config.stage2:
            from textwm.experiments.comparison_agents import run_stage2

            self.echo(f"world models' report: {report}; Stage 2 ...")
            run_stage2(self)
            report = write_report(self)
        self.echo(f"comparison finished: {report}")
        return report

    def _stage2_alone(self, until: str) -> Path | None:
        """``run`` with ``stage1`` off: Stage 2's steps (``agents``, ``report``), then the report (``report``,
        ``scores``)."""

        if until in ("agents", "report"):
            run_stage2(self)
        if until in ("train", "generate", "agents"):
            self.echo(f"Stage 2 alone: report with the same command without --until ({self.state_file})")
            return None
        report = write_report(self)
        self.echo(f"Stage 2 report: {report}")
        return report

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
            from textwm.demo import DemoConfig
            from textwm.envs.build import build
            from textwm.envs.registry import get_env

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
        from textwm.models.tiny import build_tiny_model, chat_texts, save_checkpoint, train_tokenizer

        c = self.config
        if c.init:
            from textwm.experiments.pretrained_regime import start_record

            return start_record(self)
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

    def train_all(self) -> None:
        """Every arm, in waves of up to ``parallel`` arms whose start is trained (one process per arm)."""
        def done(name: str) -> bool:
            return f"train/{name}" in self.state["done"]

        for arm in self.arms:
            if done(arm.name):
                self.echo(f"train/{arm.name}: done earlier, skipped")
        while todo := [a for a in self.arms if not done(a.name)]:
            ready = [a for a in todo if a.start == "init" or done(a.start)]
            wave = ready[:self.config.parallel]
            if len(wave) == 1:
                self._step(f"train/{wave[0].name}", lambda arm=wave[0]: {**self.train_arm(arm), "concurrent_arms": 1})
            else:
                self._train_concurrently(wave)

    def _train_concurrently(self, wave: list[Arm]) -> None:
        import multiprocessing
        import signal

        # spawn: a forked child of a process that touched CUDA cannot use it.
        context = multiprocessing.get_context("spawn")
        jobs = []
        # A SIGTERM to this process (a job's limit, `timeout`) must not leave the trainers running: a rerun would
        # start new ones writing the same checkpoints. It becomes SystemExit, and `finally` stops the children.
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
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
                    failed.append(f"train/{arm.name} (exit code {process.exitcode}; its traceback is in the log "
                                  "above)")
                    continue
                result = {**json.loads(record.read_text()), "concurrent_arms": len(wave)}
                self.state["done"][f"train/{arm.name}"] = result
                write_json(self.state_file, self.state)     # what finished is kept even if a sibling failed
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
            from textwm.experiments.pretrained_regime import train_by_epochs

            return train_by_epochs(self, arm)
        import torch

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

    def generate_arm(self, arm: Arm) -> dict[str, Any]:
        """Greedy and ``samples`` sampled decodings of the held-out rows (GPU work; no scoring), one model load
        for all of them (:func:`textwm.generation.runner.run_passes`)."""
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
            from textwm.experiments.pretrained_regime import score_arm

            return score_arm(self, arm)

        c = self.config
        folder = self.path("eval", arm.folder)
        scores = score_file("test", folder / "greedy" / "test_outputs.jsonl", folder / "greedy",
                            ScoreOptions(mauve_max_samples=c.eval_rows))
        diversity = sampled_diversity([folder / f"sample_{k}" / "test_outputs.jsonl" for k in range(c.samples)])
        return {"scores": scores, "diversity": diversity, **self.state["done"][f"generate/{arm.name}"],
                "sampled_decode_tokens_per_second": sampled_decode_rate([folder / f"sample_{k}" for k in range(c.samples)]),
                "empty_share": empty_share(folder / "greedy" / "test_outputs.jsonl")}


def _train_in_child(config: ComparisonConfig, arm: Arm) -> None:
    """One arm's training in its own process (:meth:`Comparison.train_all` with ``parallel`` > 1); its record
    (``arms/<arm>/train_record.json``) is what the parent adds to ``state.json``."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {arm.name} %(levelname)s %(name)s: %(message)s")
    Comparison(config, echo=lambda line: log.info("%s", line)).train_arm(arm)
