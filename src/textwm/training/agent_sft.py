"""A small AR agent trained by the one trainer on an env's gold demos: the warm start before GRPO (the demo's
and the comparison's Stage 2), so that the agent has some real success to improve on.

The agent's tokenizer is trained on the task rows and the demos (every word the agent reads or writes); the
demos become one row per assistant turn (:mod:`textwm.data.agent_turns`).

    figures = train_agent_on_demos(AgentSFT(demos="data/sft_train.jsonl", tasks="data/rl_train.jsonl",
                                            out="runs/agent", steps=300))
    # or a pretrained start fine-tuned on the demos (textwm.models.pretrained):
    AgentSFT(..., init="smollm2-135m-instruct", learning_rate=5e-5)
    # the agent: runs/agent/sft/final (textwm.eval.run --agent-path, or the GRPO launcher's model path)
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.data.agent_turns import agent_turn_rows
from textwm.data.jsonl import read_jsonl, write_jsonl
from textwm.models.tiny import build_tiny_checkpoint, chat_texts
from textwm.training.config import SFTConfig


@dataclass(frozen=True)
class AgentSFT:
    demos: str
    tasks: str
    out: str
    steps: int
    size: str = "tiny"
    vocab_size: int = 1024
    cutoff_len: int = 3072
    learning_rate: float = 3e-3
    batch_size: int = 8
    seed: int = 0
    #: The agent to fine-tune: a pretrained start's name or an AR checkpoint folder; empty: a tiny random model
    #: of ``size`` whose tokenizer is trained on the task rows and demos (``size`` and ``vocab_size`` apply to it).
    init: str = ""
    #: Also keep the agent every N steps (``<out>/sft/checkpoint-N``, model and tokenizer, no optimizer state), so
    #: that a run can pick the step to start GRPO from (:func:`sft_checkpoints`); 0: the final agent alone.
    save_every: int = 0

    @property
    def final(self) -> Path:
        """The trained agent's checkpoint."""
        return sft_agent_path(self.out)


def sft_agent_path(out: str | Path) -> Path:
    """Where :func:`train_agent_on_demos` with ``out`` puts the trained agent."""
    return Path(out) / "sft" / "final"


def train_agent_on_demos(job: AgentSFT) -> dict[str, Any]:
    """Build the agent (``<out>/init``; or take ``job.init``) and train it (``<out>/sft/final``); returns what it
    trained on and how."""
    # heavy: loads torch
    import torch

    if job.steps < 1 or job.save_every < 0:
        raise ValueError(f"agent SFT steps must be >= 1 and save_every >= 0, got {job.steps} and {job.save_every}")

    # heavy: loads torch and transformers
    from textwm.training.trainer import train

    out = Path(job.out)
    shutil.rmtree(out / "sft", ignore_errors=True)      # a redone SFT keeps none of an earlier run's steps
    demos = read_jsonl(job.demos)
    rows = agent_turn_rows(demos)
    turns = out / "sft_turns.jsonl"
    write_jsonl(turns, rows)
    start = job.init
    if not start:
        tasks = read_jsonl(job.tasks).rows
        build_tiny_checkpoint(out / "init", list(chat_texts(tasks + demos.rows)), family="ar", size=job.size,
                              vocab_size=job.vocab_size, seed=job.seed + 1)
        start = str(out / "init")
    result = train(SFTConfig(
        model_name_or_path=start, objective="ar", train_file=str(turns), output_dir=str(out / "sft"),
        final_dir="final", cutoff_len=job.cutoff_len, truncate_mode="cut", learning_rate=job.learning_rate,
        per_device_train_batch_size=job.batch_size, max_steps=job.steps, lr_scheduler_type="cosine",
        warmup_ratio=0.05, logging_steps=max(1, job.steps // 10), save_steps=job.save_every or job.steps,
        save_total_limit=None if job.save_every else 1, seed=job.seed, bf16=torch.cuda.is_available()))
    checkpoints = _agents_of_checkpoints(out / "sft") if job.save_every else []
    return {"demos": len(demos.rows), "turn_rows": len(rows), "steps": result.global_step, "init": job.init or "tiny",
            "checkpoints": [step for step, _ in checkpoints],
            "train_loss": round(result.train_loss, 4),
            "loss_curve": [(h["step"], h["loss"]) for h in result.log_history if "loss" in h and "step" in h]}


#: What a trainer checkpoint holds beyond the model: not needed to run the agent.
_TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin")


def sft_checkpoints(out: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of every agent :func:`train_agent_on_demos` kept with ``save_every``, in step order."""
    folders = Path(out, "sft").glob("checkpoint-*")
    return sorted((int(f.name.rsplit("-", 1)[1]), f) for f in folders if f.name.rsplit("-", 1)[1].isdigit())


def _agents_of_checkpoints(sft: Path) -> list[tuple[int, Path]]:
    """Make every ``checkpoint-N`` under ``sft`` a runnable agent (the final agent's tokenizer and generation
    files beside its weights) and drop its training state (an optimizer's state is twice the model)."""

    final = sft / "final"
    kept = {p.name for p in final.iterdir()
            if not p.name.startswith(("model", "pytorch_model")) and p.name not in _TRAINING_STATE}
    checkpoints = sft_checkpoints(sft.parent)
    for _, folder in checkpoints:
        for name in _TRAINING_STATE:
            (folder / name).unlink(missing_ok=True)
        for name in kept - {p.name for p in folder.iterdir()}:
            source = final / name
            (shutil.copytree if source.is_dir() else shutil.copyfile)(source, folder / name)
    return checkpoints
