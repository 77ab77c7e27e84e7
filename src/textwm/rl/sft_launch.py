"""The SFT run of an agent on demonstrations (the warm start before GRPO): one config, one ``swift sft`` command line.

Every knob is a field of :class:`AgentSFTConfig` with its default and the environment variable the shell
launchers have always read (``MODEL_PATH``, ``DATA``, ``NUM_GPUS``, ``LR``, ...), so
``sciworld/run_sciworld_qwen3_sft.sh`` only exports its model's defaults and runs (through
``scripts/lib/agent_sft.sh``, which also finds the paper's released file for ``DATA``)

    python -m textwm.rl.sft_launch --env sciworld [--flag VALUE ...] [-- extra swift arguments]

The GPU layout is every swift launcher's (:mod:`textwm.swift_launch`): ``NUM_GPUS`` > 1 makes swift re-launch
itself under torchrun (``NPROC_PER_NODE``, ``MASTER_PORT``) with DeepSpeed ZeRO-2 by default; ``NUM_GPUS=0`` hides
the GPUs and runs in float32 (tiny models only). Checkpoints land in ``$OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigError
from textwm.rl.launch import AgentRunConfig, default_data
from textwm.swift_launch import apply_gpu_layout, default_swift, knob, launcher_main, warn_no_gpu


@dataclass
class AgentSFTConfig(AgentRunConfig):
    """SFT of an agent LLM on chat demonstrations (swift sft, full parameters)."""

    data: str = knob("", "chat rows {'messages': [...]}: sft_train.jsonl of <env>/build_wm_dataset.py, or the "
                          "paper's demos", "DATA")
    paper_data: str = knob("", "the paper's names of the demos file (space-separated), named when DATA is missing",
                            "PAPER_DATA")
    val_data: str = knob("", "held-out chat rows (empty: none)", "VAL_DATA")
    run_name: str = knob("", "run name (default: <env>_sft)", "RUN_NAME")
    deepspeed: str = knob("", "DeepSpeed config: zero2, zero3 or a JSON file; none: off (default: zero2 on more "
                               "than one GPU)", "DEEPSPEED")
    torch_dtype: str = knob("", "the weights' dtype (default: bfloat16 under DeepSpeed, which keeps float32 master "
                                 "weights, else float32 with bf16 compute on GPU)", "TORCH_DTYPE")
    max_length: int = knob(8192, "tokens per demo at most", "MAX_LENGTH")
    epochs: float = knob(1, "passes over the demos", "EPOCHS")
    per_device_train_batch_size: int = knob(1, "demos per device per step", "PER_DEVICE_TRAIN_BATCH_SIZE")
    grad_accum_steps: int = knob(4, "micro-batches per optimizer step", "GRAD_ACCUM_STEPS")
    lr: float = knob(2e-6, "learning rate", "LR")
    lr_sched: str = knob("cosine", "learning-rate schedule", "LR_SCHED")
    warmup_ratio: float = knob(0.1, "share of steps for warm-up", "WARMUP_RATIO")
    max_grad_norm: float = knob(1.0, "gradient clipping", "MAX_GRAD_NORM")
    gradient_checkpointing: bool | None = knob(None, "default: on GPU", "GRADIENT_CHECKPOINTING")
    save_steps: int = knob(5, "checkpoint every N steps", "SAVE_STEPS")
    save_total_limit: int = knob(3, "checkpoints kept", "SAVE_TOTAL_LIMIT")
    report_to: str = knob("", "none, wandb, tensorboard (default: wandb when WANDB_API_KEY is set, else none)",
                           "REPORT_TO")

    def __post_init__(self) -> None:
        name = self.launcher or "textwm.rl.sft_launch"
        if not self.env:
            raise ConfigError(f"{name}: no env; give --env NAME")
        self.data = self.data or default_data(self.root, self.env, self.paper_data, "sft_train.jsonl")
        if not Path(self.data).is_file():
            hint = ""
            if self.paper_data:
                hint = (f" or put the paper's released file ({self.paper_data}; the paper's data/ folder, or shared/data/ "
                        f"of a checkout that has it) in {self.env}/data/, where it is used when DATA is unset,")
            raise ConfigError(f"{name}: DATA '{self.data}' not found. Build demonstrations from the real env with "
                              f"python {self.env}/build_wm_dataset.py --out-dir runs/{self.env}_data,{hint} or point "
                              "DATA at a chat JSONL.")
        for name in ("max_length", "per_device_train_batch_size", "grad_accum_steps", "save_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", key=name.upper())

    def resolved(self) -> AgentSFTConfig:
        """The defaults that depend on the env and the GPUs, filled in."""
        gpus = self.gpus
        run_name = self.run_name or f"{self.env}_sft"
        deepspeed = self.deepspeed or ("zero2" if gpus > 1 else "none")
        return dataclasses.replace(
            self, num_gpus=gpus, run_name=run_name, output_dir=self.default_output_dir(run_name),
            deepspeed=deepspeed,
            torch_dtype=self.torch_dtype or ("bfloat16" if gpus > 0 and deepspeed != "none" else "float32"),
            gradient_checkpointing=gpus > 0 if self.gradient_checkpointing is None else self.gradient_checkpointing,
            report_to=self.report_to or ("wandb" if os.environ.get("WANDB_API_KEY") else "none"),
            swift=self.swift or default_swift())

    def argv(self, extra: list[str] = ()) -> list[str]:
        """The ``swift sft`` command line (of the resolved config)."""
        c = self.resolved()
        b = lambda v: "true" if v else "false"  # noqa: E731
        n = lambda v: f"{v:g}"  # noqa: E731
        argv = [c.swift, "sft", "--model", c.model_path, "--template", c.template, "--use_hf", b(c.use_hf),
                "--check_model", b(c.check_model), "--tuner_type", "full", "--dataset", c.data,
                "--split_dataset_ratio", "0", "--torch_dtype", c.torch_dtype, "--max_length", str(c.max_length),
                "--num_train_epochs", n(c.epochs), "--per_device_train_batch_size", str(c.per_device_train_batch_size),
                "--gradient_accumulation_steps", str(c.grad_accum_steps), "--learning_rate", n(c.lr),
                "--lr_scheduler_type", c.lr_sched, "--warmup_ratio", n(c.warmup_ratio),
                "--max_grad_norm", n(c.max_grad_norm), "--gradient_checkpointing", b(c.gradient_checkpointing),
                "--save_steps", str(c.save_steps), "--save_total_limit", str(c.save_total_limit),
                "--logging_steps", str(c.logging_steps), "--dataset_num_proc", str(c.dataset_num_proc),
                "--dataloader_num_workers", str(c.dataloader_num_workers), "--report_to", c.report_to,
                "--run_name", c.run_name, "--seed", str(c.seed), "--output_dir", c.output_dir]
        if c.model_type:
            argv += ["--model_type", c.model_type]
        if c.val_data:
            argv += ["--val_dataset", c.val_data]
        if c.deepspeed != "none":
            argv += ["--deepspeed", c.deepspeed]
        if c.num_gpus and c.torch_dtype == "float32":      # float32 master weights, bf16 compute
            argv += ["--bf16", "true", "--fp16", "false"]
        return [*argv, *extra]

    def environ(self) -> dict[str, str]:
        """The environment of the swift process: the GPU layout."""
        c = self.resolved()
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
        apply_gpu_layout(env, c.num_gpus, c.master_port)
        return env


def run(config: AgentSFTConfig, extra: list[str] = ()) -> int:
    """Run swift with ``config`` (announcing the CPU fallback and 16-bit weights without DeepSpeed); its status."""
    c = config.resolved()
    name = c.launcher or "textwm.rl.sft_launch"
    if c.num_gpus == 0:
        warn_no_gpu(name, f"CPU run in {c.torch_dtype}")
    elif c.deepspeed == "none" and c.torch_dtype != "float32":
        print(f"{name}: warning: {c.torch_dtype} weights without DeepSpeed: the optimizer steps them itself and a step "
              f"smaller than ~1/256 of a weight rounds to nothing (at LR={c.lr:g} most do); leave TORCH_DTYPE unset "
              "or set DEEPSPEED", file=sys.stderr)
    print(f"{name}: {c.model_path} on {c.data} -> {c.output_dir}; {c.num_gpus} GPU(s), {c.torch_dtype}", file=sys.stderr)
    return subprocess.run(c.argv(list(extra)), env=c.environ(), check=False).returncode


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.rl.sft_launch") -> int:
    """``python -m textwm.rl.sft_launch --env NAME [flags] [-- swift arguments]``."""
    return launcher_main(AgentSFTConfig, run, argv, prog)


if __name__ == "__main__":
    raise SystemExit(main())
