"""GRPO of an agent inside a served world model, as one call: ``swift rlhf`` with the env's plugin (through
:mod:`textwm.rl.launch`), then what the run says: the reward per step, where each simulated step was answered
(local responder or world model, and WM errors), the per-step curves (:func:`step_records`), and the last
checkpoint copied out as the trained agent.

The demo's GRPO stage and the comparison's Stage 2 run it; the stack in front of the world model is
:func:`textwm.serving.local_stack.local_wm_stack`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.envs.registry import get_env
from textwm.rl.launch import GRPOConfig, swift_model_args
from textwm.rl.launch import run as run_grpo


@dataclass(frozen=True)
class GRPOInWM:
    """A small GRPO run (CPU-sized defaults: the demo's) from ``agent_path`` on the task ``rows``."""

    env: str
    rows: str
    agent_path: str
    steps: int
    turns: int
    wm_max_tokens: int
    num_gpus: int = 0
    num_generations: int = 2
    batch_size: int = 2
    #: Tasks (GRPO groups) per optimizer step; 0: ``batch_size / num_generations`` (one micro-batch a step).
    tasks_per_step: int = 0
    max_completion_length: int = 16
    learning_rate: float | None = None
    #: Rollouts by swift's own generate, not vLLM: the agents here are small, and a colocated vLLM would take
    #: its share of the GPU the world model's server runs on.
    use_vllm: bool = False
    run_name: str = "grpo_in_wm"
    launcher: str = "textwm"
    #: The world model's sampling temperature in rollouts (0: greedy).
    wm_temperature: float = 0.7
    #: ms-swift's dynamic sampling (groups without reward spread regenerated): off in the CPU-sized runs, where a
    #: regeneration round costs as much as the step.
    dynamic_sample: bool = False
    #: ``wm`` (the simulator at the endpoint) or ``real`` (every rollout in the env server at ``real_env_url``).
    rollout_env: str = "wm"
    real_env_url: str = ""
    #: Keep the agent every N steps (``checkpoint-N`` in the run folder, weights only) for a success curve over
    #: the run; 0: only the last step's.
    save_every: int = 0
    seed: int = 42


def run_grpo_in_wm(run: GRPOInWM, endpoint: str, out: Path, agent_out: Path, log_file: Path) -> dict[str, Any]:
    """GRPO for ``run.steps`` steps with the world model at ``endpoint`` (or, with ``run.rollout_env`` real, in the
    env server at ``run.real_env_url``; ``endpoint`` unused); the trained agent goes to ``agent_out``.

    Raises ``RuntimeError`` naming the log when swift exits non-zero. Returns the figures of the run."""

    shutil.rmtree(out, ignore_errors=True)
    extra = {"lr": run.learning_rate} if run.learning_rate is not None else {}
    model_type, template = swift_model_args(run.agent_path)
    if endpoint:
        extra["wm_endpoint"] = endpoint
    every = run.save_every or run.steps
    grpo = GRPOConfig(env=run.env, data=run.rows, model_path=run.agent_path, model_type=model_type, template=template,
                      rollout_env=run.rollout_env, real_env_url=run.real_env_url, wm_guard="1", output_dir=str(out),
                      run_name=run.run_name, num_gpus=run.num_gpus, num_generations=run.num_generations,
                      per_device_train_batch_size=run.batch_size, grad_accum_steps=1,
                      tasks_per_step=run.tasks_per_step, max_turns=run.turns,
                      max_completion_length=run.max_completion_length, max_length=4096, save_steps=every,
                      save_total_limit=-(-run.steps // every), report_to="tensorboard", dataset_num_proc=1,
                      dataloader_num_workers=0, wm_max_tokens=run.wm_max_tokens, wm_temperature=run.wm_temperature,
                      dynamic_sample=run.dynamic_sample, use_vllm=run.use_vllm, seed=run.seed,
                      launcher=run.launcher, **extra)
    with open(log_file, "w") as logf:
        code = run_grpo(grpo, ["--max_steps", str(run.steps), "--save_only_model", "true"], stdout=logf)
    if code != 0:
        raise RuntimeError(f"GRPO failed (exit {code}); see {log_file}")
    (run_dir,) = out.glob("v*-*")
    metric = f"rewards/{get_env(run.env).class_prefix}Reward/mean"
    steps = step_records(run_dir, metric)
    checkpoint = grpo_checkpoints(run_dir)[-1][1]
    shutil.copytree(checkpoint, agent_out, dirs_exist_ok=True)
    episodes = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    return {"reward_metric": metric, "wm_temperature": run.wm_temperature, "run_dir": str(run_dir),
            "reward_per_step": [s["reward"] for s in steps], "turns_per_step": [s["turns"] for s in steps],
            "steps": steps, "tasks_per_step": grpo.tasks_per_optimizer_step(), "episodes": len(episodes),
            "rollout_env": run.rollout_env,
            "real_answered_steps": sum(s == "real" for e in episodes for s in e["sources"]),
            "wm_answered_steps": sum(s == "wm" for e in episodes for s in e["sources"]),
            "local_answered_steps": sum(s == "local" for e in episodes for s in e["sources"]),
            "fallback_steps": sum(s == "fallback" for e in episodes for s in e["sources"]),
            "wm_errors": sum(bool(e["wm_error"]) for e in episodes)}


def grpo_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of the agents a GRPO run kept, in step order."""
    return sorted((int(p.name.split("-")[1]), p) for p in run_dir.glob("checkpoint-*"))


def step_records(run_dir: Path, metric: str) -> list[dict[str, Any]]:
    """One record per optimizer step of a swift GRPO run: ``reward`` (``metric``), ``kl``, ``entropy`` (the
    policy's mean token entropy), ``turns``, and from the plugin's ``reward_batches.jsonl`` the rewarded batches
    of the step (``rounds``: 1 + the dynamic-sampling regenerations) and the share of groups with no reward spread
    in its first round (``zero_spread``: what dynamic sampling had to replace)."""
    logs = [json.loads(line) for line in (run_dir / "logging.jsonl").read_text().splitlines()]
    batches_file = run_dir / "reward_batches.jsonl"
    batches = [json.loads(x) for x in batches_file.read_text().splitlines()] if batches_file.is_file() else []
    by_step: dict[int, list[dict[str, Any]]] = {}
    for b in batches:
        if isinstance(b.get("step"), int):
            by_step.setdefault(b["step"], []).append(b)
    records = []
    for r in (r for r in logs if metric in r):
        step = int(str(r.get("global_step/max_steps", len(records) + 1)).split("/")[0])
        rounds = by_step.get(step - 1, [])     # the reward function sees the step before it ends
        first = rounds[0] if rounds else {}
        records.append({"step": step, "reward": round(r[metric], 4), "kl": r.get("kl"),
                        "entropy": r.get("entropy/mean", r.get("entropy")), "turns": r.get("num_turns"),
                        "rounds": len(rounds) or None,
                        "zero_spread": round(first["zero_spread_groups"] / first["groups"], 4) if first.get("groups")
                        else None})
    return records
