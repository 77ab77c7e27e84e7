"""The embedded default: the whole two-stage pipeline in miniature, on a CPU, with a report.

Stages (:meth:`Demo.stages`, run by :class:`~textwm.experiments.stages.StageRunner`: each finished stage is
recorded in ``<out>/state.json`` and skipped on the next run unless ``fresh``):

1. ``data``: a small world-model dataset from the real env (``--env``: ScienceWorld, a few task types,
   train and test split by variation; ALFWorld, games generated offline, test on unseen floor plans),
   plus RL task rows (the env builder's ``demo_config``);
2. ``train``: a tiny AR and a tiny SDAR world model of the same size, same tokenizer, same rows,
   same number of steps;
3. ``wm_eval``: both (and their untrained initialisations) generate on held-out transitions; one
   scorer, one side-by-side table and chart;
4. ``grpo``: a tiny agent trained on the env's gold demos (``agent_sft_steps``; a random agent where the env
   has none), then its GRPO steps with ``swift rlhf`` and the env's plugin inside the world model (the native
   server with the SDAR model + proxy, stopped after);
5. ``agent_eval``: the agent before and after GRPO in the real env, in the world model, replayed
   (W2R), and the world model's fidelity (Real / WM / W2R / CR);
6. ``report``: ``report.md`` with every figure under its metric name and wall time per stage.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textwm.config import config_dict
from textwm.data.jsonl import DataError, read_jsonl, write_jsonl
from textwm.demo_report import render
from textwm.envs.build import build
from textwm.envs.registry import get_env
from textwm.envs.task_types import write_agent_files
from textwm.eval.paired import compare, load_episodes
from textwm.eval.run import EvalConfig, run
from textwm.experiments.common import BLOCKS
from textwm.experiments.demo_config import DemoConfig
from textwm.experiments.report_writer import write_markdown
from textwm.experiments.stages import Legacy, Stage, StageRunner
from textwm.generation.runner import EvalGenerateConfig
from textwm.generation.runner import run as generate
from textwm.generation.settings import DecodeSettings
from textwm.metrics import report
from textwm.metrics.scorer import ScoreOptions, score_file
from textwm.models.checkpoint import read_spec
from textwm.models.tiny import (
    build_tiny_checkpoint,
    build_tiny_model,
    chat_texts,
    save_checkpoint,
    train_tokenizer,
)
from textwm.rl.in_wm import GRPOInWM, run_grpo_in_wm
from textwm.serving.local_stack import local_wm_stack
from textwm.training.agent_sft import AgentSFT, sft_agent_path, train_agent_on_demos
from textwm.training.config import SFTConfig

log = logging.getLogger(__name__)

def _from_stages_json(old: dict[str, Any]) -> dict[str, Any]:
    """The demo's state from before the one state format (``stages.json``: ``{"config": {...}, "stages": {name:
    {"name", "seconds", "figures"}}}``), as :class:`~textwm.experiments.stages.StageRunner` reads it."""
    return {"config": old["config"], "stages": {name: {"status": "done", "seconds": record["seconds"],
                                                       "result": record["figures"]}
                                                for name, record in old["stages"].items()}}


class Demo:
    """The demo's stages (:meth:`stages`) over one :class:`~textwm.experiments.stages.StageRunner` in
    ``config.out``."""

    def __init__(self, config: DemoConfig, *, fresh: bool = False, echo: Callable[[str], None] = print):
        self.config = config
        self.out = Path(config.out)
        self.echo = echo
        self.runner = StageRunner(self.out, pipeline="demo", config=config_dict(config),
                                  ignore=config.RUN_ONLY_SETTINGS, legacy=Legacy("stages.json", _from_stages_json),
                                  fresh=fresh, echo=echo)

    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def agent_file(self, name: str) -> Path:
        """The agent stages' copy of ``data/<name>`` (rl_train, rl_test, sft_train): the file itself, or with
        ``agent_tasks`` the rows of those types (``data/agent/<name>``, written by the data stage)."""
        return self.path("data", "agent", name) if self.config.agent_tasks else self.path("data", name)

    def stages(self) -> list[Stage]:
        """The demo in order (module docstring); the report is written again on every run."""
        return [Stage("data", self.stage_data),
                Stage("train", self.stage_train, after=("data",)),
                Stage("wm_eval", self.stage_wm_eval, after=("train",)),
                Stage("grpo", self.stage_grpo, after=("train",)),
                Stage("agent_eval", self.stage_agent_eval, after=("grpo",)),
                Stage("report", self.stage_report, after=("wm_eval", "agent_eval"), always=True)]

    def run(self) -> Path:
        self.runner.run(self.stages(), numbered=True)
        self.echo(f"demo finished: {self.path('report.md')}")
        return self.path("report.md")

    # --- 1. data -----------------------------------------------------------------------------------

    def stage_data(self) -> dict[str, Any]:
        c = self.config
        builder = get_env(c.env).dataset_builder()
        config = builder.demo_config(self.path("data"), c)
        report = build(c.env, config)
        test = read_jsonl(self.path("data", "wm_test.jsonl")).rows
        # A fixed sample of the held-out rows (the file is grouped by task type), under eval_generate's file pattern.
        scored = random.Random(c.seed).sample(test, min(len(test), c.eval_rows))
        write_jsonl(self.path("data", "eval_test.jsonl"), scored)
        figures = {"transitions": report.transitions, "tasks": sorted(report.families), "eval_rows": len(scored)}
        if c.agent_tasks:
            figures["agent_rows"] = write_agent_files(get_env(c.env), self.path("data"), self.path("data", "agent"),
                                                      c.agent_tasks)
        return figures

    # --- 2. train ----------------------------------------------------------------------------------

    def stage_train(self) -> dict[str, Any]:
        # heavy: loads torch and transformers
        from textwm.training.trainer import train

        c = self.config
        rows = read_jsonl(self.path("data", "wm_train.jsonl")).rows
        figures: dict[str, Any] = {}
        for family in c.families:
            # One tokenizer for all (diffusion ones add the mask token): same rows, same vocabulary.
            tokenizer = train_tokenizer(chat_texts(rows), vocab_size=c.vocab_size, with_mask_token=family != "ar")
            block = BLOCKS[family]
            model = build_tiny_model(tokenizer, family=family, size=c.size, block_size=block, seed=c.seed)
            save_checkpoint(model, tokenizer, self.path(f"init_{family}"))
            result = train(SFTConfig(
                model_name_or_path=str(self.path(f"init_{family}")), objective=family,
                train_file=str(self.path("data", "wm_train.jsonl")), output_dir=str(self.path(f"wm_{family}")),
                cutoff_len=c.cutoff_len, truncate_mode="drop", neat_packing=False, learning_rate=c.learning_rate,
                per_device_train_batch_size=c.batch_size, max_steps=c.train_steps, lr_scheduler_type="cosine",
                warmup_ratio=0.05, logging_steps=max(1, c.train_steps // 10), save_steps=10 * c.train_steps,
                block_length=block, seed=c.seed))
            figures[family] = {"train_loss": round(result.train_loss, 4), "steps": result.global_step,
                               "parameters": sum(p.numel() for p in model.parameters())}
        return figures

    # --- 3. world-model evaluation -----------------------------------------------------------------

    def stage_wm_eval(self) -> dict[str, Any]:
        c = self.config
        summaries = {}
        for name in (f"{stage}_{family}" for family in c.families for stage in ("init", "wm")):
            gen_dir = self.path("wm_eval", name)
            generate(EvalGenerateConfig(model_path=str(self.path(name)), data_dir=str(self.path("data")),
                                        datasets=["test"], output_dir=str(gen_dir), num_gpus=0, per_batch=16,
                                        decode=DecodeSettings(gen_length=c.gen_length, block_length=4,
                                                              denoising_steps=c.denoising_steps, temperature=0.0)))
            summary = score_file("test", gen_dir / "test_outputs.jsonl", gen_dir,
                                 ScoreOptions(mauve_max_samples=c.eval_rows))
            report.write_report({"test": summary}, gen_dir, title=name)
            summaries[name] = summary
        paths = report.compare_runs([f"{n}={self.path('wm_eval', n)}" for n in summaries], self.path("wm_eval"),
                                    title=f"World models on held-out {get_env(c.env).title} transitions")
        return {"scores": summaries, "table": str(paths["markdown"]), "chart": str(paths["chart"])}

    # --- 4. GRPO inside the world model ------------------------------------------------------------

    def _stack(self):
        """The SDAR world model served (native server + proxy) for the GRPO and agent-in-WM stages."""

        c = self.config
        return local_wm_stack(self.path("wm_sdar"), log_dir=self.path("stack"), wm_port=c.wm_port,
                              proxy_port=c.proxy_port, device="cpu", served_model_name="demo-sdar-wm",
                              decode=DecodeSettings(gen_length=c.gen_length, temperature=0.0,
                                                    denoising_steps=c.denoising_steps))

    def _agent_before_grpo(self) -> tuple[str, Path]:
        """The agent GRPO starts from: trained on the gold demos when the stage did that, else its start (the
        pretrained ``agent_init`` as it is, or the random one)."""

        sft = sft_agent_path(self.path("agent"))
        if sft.is_dir():
            return "agent_sft", sft
        return "agent_init", Path(read_spec(self.config.agent_init).path) if self.config.agent_init else \
            self.path("agent_init")

    def stage_grpo(self) -> dict[str, Any]:
        c = self.config
        demos = self.agent_file("sft_train.jsonl")
        demo_rows = read_jsonl(demos, allow_empty=True).rows if demos.is_file() else []
        figures: dict[str, Any] = {}
        if c.agent_sft_steps and demo_rows:
            # The warm start: SFT on the gold demos, so that the agent has some real success before GRPO.
            figures["agent_sft"] = train_agent_on_demos(AgentSFT(
                demos=str(demos), tasks=str(self.agent_file("rl_train.jsonl")), out=str(self.path("agent")),
                steps=c.agent_sft_steps, size=c.size, vocab_size=c.vocab_size, cutoff_len=c.cutoff_len,
                learning_rate=c.agent_learning_rate, seed=c.seed, init=c.agent_init))
        elif c.agent_init:     # GRPO from the pretrained start as it is (_agent_before_grpo)
            figures["agent_sft"] = {"skipped": "no gold demos" if c.agent_sft_steps else "agent_sft_steps is 0"}
        else:
            agent_rows = read_jsonl(self.agent_file("rl_train.jsonl")).rows + demo_rows
            build_tiny_checkpoint(self.path("agent_init"), list(chat_texts(agent_rows)), family="ar", size=c.size,
                                  vocab_size=c.vocab_size, seed=c.seed + 1)
            figures["agent_sft"] = {"skipped": "no gold demos" if c.agent_sft_steps else "agent_sft_steps is 0"}
        name, agent = self._agent_before_grpo()
        run = GRPOInWM(env=c.env, rows=str(self.agent_file("rl_train.jsonl")), agent_path=str(agent),
                       steps=c.grpo_steps, turns=c.grpo_turns, wm_max_tokens=c.gen_length, run_name="demo_grpo",
                       launcher="demo")
        with self._stack() as endpoint:
            figures.update(run_grpo_in_wm(run, endpoint, self.path("grpo"), self.path("agent_grpo"),
                                          self.path("grpo.log")))
        return {**figures, "agent_before_grpo": name}

    # --- 5. agent evaluation and WM fidelity -------------------------------------------------------

    def stage_agent_eval(self) -> dict[str, Any]:
        c = self.config
        results = {}
        # An env expert that reads only the conversation (AppWorld's) is a competent agent in both worlds: its
        # Real / WM / W2R say how far the world model is from the real env for an agent that can do the tasks.
        before, agent = self._agent_before_grpo()
        agents = {before: {"agent_path": str(agent)}, "agent_grpo": {"agent_path": str(self.path("agent_grpo"))}}
        if get_env(c.env).conversation_expert:
            agents["expert"] = {"agent": "expert"}
        with self._stack() as endpoint:
            for name, agent in agents.items():
                out = run(EvalConfig(mode="all", env=c.env, output_dir=str(self.path("agent_eval", name)),
                                     rows=str(self.agent_file("rl_test.jsonl")), episodes=c.agent_episodes,
                                     max_turns=c.agent_turns, workers=c.workers, device="cpu",
                                     wm_endpoint=endpoint, wm_max_tokens=c.gen_length, **agent))
                results[name] = {k: out.get(k) for k in ("real", "wm", "w2r", "fidelity")}
        # The same held-out tasks before and after GRPO: compared pair by pair (exact McNemar, bootstrap).

        try:
            paired = compare(load_episodes(self.path("agent_eval", before)),
                             load_episodes(self.path("agent_eval", "agent_grpo"))).to_dict()
        except (DataError, ValueError) as exc:       # recorded and shown; the evaluations above stand
            log.warning("agent_eval: no paired comparison of %s and agent_grpo: %s", before, exc)
            paired = {"error": str(exc)}
        results["agent_grpo"]["paired_with_before"] = paired
        return results

    # --- 6. report -----------------------------------------------------------------------------------

    def stage_report(self) -> dict[str, Any]:
        write_markdown(self.path("report.md"), render(self.config, self.runner.records, self.out))
        return {"report": str(self.path("report.md"))}
