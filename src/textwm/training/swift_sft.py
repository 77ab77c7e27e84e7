"""Full-parameter SFT of an autoregressive world model with ms-swift (Stage 1's AR baseline): one config, one
``swift sft --tuner_type full`` command line.

Every knob is a field of :class:`ARSFTConfig` with the default and the environment variable that
``llm_training/train.sh`` has always read (``MODEL``, ``TRAIN_FILE``, ``VAL_FILE``, ``NUM_GPUS``, ``LR``, ...), so
the script only finds this checkout's Python and runs

    python -m textwm.training.swift_sft [--flag VALUE ...] [--print-command] [-- extra swift arguments]

(``textwm train swift`` is the same). Extra arguments are appended to the swift line, so they override the knobs.
With GPUs the run is bf16, flash-attn, packed and DeepSpeed ZeRO-2; with ``NUM_GPUS=0`` it falls back to float32,
sdpa, no packing, no DeepSpeed (tiny models only; announced). GPU layout: :mod:`textwm.swift_launch`.
Checkpoints land in ``$OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>``; the resolved config beside them.

Tiny CPU run (a random tiny Qwen3 built in code; ~10 s a step)::

    python -m textwm.training.swift_sft --num-gpus 0 --model runs/tiny_ar --model-type qwen3 --template qwen3 \\
        --train-file runs/ar_data/train.jsonl --val-file runs/ar_data/test.jsonl -- --max_steps 1
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textwm.config import ConfigError
from textwm.data.jsonl import write_json
from textwm.swift_launch import (
    MAX_DATASET_PROCS,
    SwiftRunConfig,
    apply_gpu_layout,
    default_swift,
    knob,
    launcher_main,
    swift_bool,
    swift_number,
    usable_cpus,
    warn_no_gpu,
)

#: The paper's data folder (``prepare_data.py`` run from ``llm_training/`` writes there), under the root.
PAPER_DATA_DIR = Path("llm_training") / "data"
#: Where ``llm_training/prepare_data.py --out-dir runs/ar_data`` writes, under the root.
BUILT_DATA_DIR = Path("runs") / "ar_data"
#: Where the launchers write, under the root.
RUNS_DIR = Path("runs") / "llm_training"


@dataclass
class ARSwiftConfig(SwiftRunConfig):
    """What the AR world model's swift runs (its SFT, its loss-only eval) share: the data folder and the settings
    whose defaults follow the GPUs."""

    template: str = knob("", "ms-swift chat template: qwen3, chatml, ... (empty: the model's)", "TEMPLATE")
    data_dir: str = knob("", "where prepare_data.py wrote train.jsonl / test.jsonl (default: <root>/llm_training/data "
                              "when it has the file, else <root>/runs/ar_data)", "DATA_DIR")
    torch_dtype: str = knob("", "weights and compute dtype (default: bfloat16 with GPUs, float32 without)",
                            "TORCH_DTYPE")
    attn_impl: str = knob("", "flash_attn, sdpa or eager (default: flash_attn with GPUs, sdpa without)", "ATTN_IMPL")
    packing: bool | None = knob(None, "pack sequences up to MAX_LEN; ms-swift needs flash attention for it (default: "
                                       "with GPUs)", "PACKING")
    max_len: int = knob(8192, "tokens per sample (and per pack) at most", "MAX_LEN")
    per_device_eval_batch_size: int = knob(2, "eval micro-batch per process", "PER_DEVICE_EVAL_BATCH_SIZE")
    dataset_num_proc: int | None = knob(None, f"processes for tokenising and packing (default: the CPUs, at most "
                                               f"{MAX_DATASET_PROCS})", "DATASET_NUM_PROC")

    #: The module that runs this config, named in messages when no LAUNCHER (the shell script) is.
    module: ClassVar[str] = "textwm.training.swift_sft"

    @property
    def label(self) -> str:
        """Who speaks in messages: the shell launcher (LAUNCHER), else the module."""
        return self.launcher or self.module

    def default_data_dir(self, marker: str) -> str:
        """``<root>/llm_training/data`` when it has ``marker`` (the paper's place), else ``<root>/runs/ar_data``."""
        root = Path(self.root or ".")
        return str(root / PAPER_DATA_DIR if (root / PAPER_DATA_DIR / marker).is_file() else root / BUILT_DATA_DIR)

    def device_defaults(self) -> dict:
        """The fields whose defaults follow the GPUs (and the CPU count), filled in."""
        gpu = self.gpus > 0
        return dict(num_gpus=self.gpus, torch_dtype=self.torch_dtype or ("bfloat16" if gpu else "float32"),
                    attn_impl=self.attn_impl or ("flash_attn" if gpu else "sdpa"),
                    packing=gpu if self.packing is None else self.packing,
                    dataset_num_proc=min(usable_cpus(), MAX_DATASET_PROCS) if self.dataset_num_proc is None
                    else self.dataset_num_proc,
                    swift=self.swift or default_swift())

    def _check_at_least_one(self, *names: str) -> None:
        for name in names:
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", key=name.upper())

    def environ(self) -> dict[str, str]:
        """The environment of the swift process: unbuffered output, the GPU layout."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        apply_gpu_layout(env, self.gpus, self.master_port)
        return env


@dataclass
class ARSFTConfig(ARSwiftConfig):
    """Full-parameter SFT of an AR world model with ms-swift (swift sft --tuner_type full): llm_training/train.sh."""

    model: str = knob("Qwen/Qwen3-8B", "base model: hub id or local checkpoint directory", "MODEL")
    train_file: str = knob("", "training JSONL of {'messages': [...]} rows (default: <data_dir>/train.jsonl); must "
                                "exist", "TRAIN_FILE")
    val_file: str | None = knob("", "validation JSONL, evaluated every EVAL_STEPS (default: <data_dir>/test.jsonl); "
                                     "none: train without eval (train.sh: VAL_FILE set empty)", "VAL_FILE")
    run_name: str = knob("ar_sft", "run name (wandb) and output folder name", "RUN_NAME")
    output_dir: str = knob("", "checkpoints and logs (default: <root>/runs/llm_training/<run name>)", "OUTPUT_DIR")
    deepspeed: str = knob("", "zero2, zero3, zero2_offload, zero3_offload, a JSON config path, or none (default: "
                               "zero2 with GPUs, none without)", "DEEPSPEED")
    epochs: float = knob(2, "training epochs (--max_steps N after -- overrides)", "EPOCHS")
    per_device_train_batch_size: int = knob(2, "micro-batch per process (packed sequences when packing)",
                                            "PER_DEVICE_TRAIN_BATCH_SIZE")
    grad_accum_steps: int = knob(4, "gradient accumulation steps", "GRAD_ACCUM_STEPS")
    lr: float = knob(2e-5, "peak learning rate", "LR")
    weight_decay: float = knob(0.01, "AdamW weight decay", "WEIGHT_DECAY")
    warmup_ratio: float = knob(0.03, "share of steps spent warming up (one step with 0.03 has LR 0: use 0)",
                               "WARMUP_RATIO")
    lr_sched: str = knob("cosine", "learning-rate schedule (linear, constant, ...)", "LR_SCHED")
    gradient_checkpointing: bool = knob(True, "recompute activations to save memory", "GRADIENT_CHECKPOINTING")
    eval_steps: int = knob(500, "evaluate every N steps", "EVAL_STEPS")
    save_steps: int = knob(500, "checkpoint every N steps", "SAVE_STEPS")
    save_total_limit: int = knob(3, "checkpoints kept", "SAVE_TOTAL_LIMIT")
    logging_steps: int = knob(10, "log every N steps", "LOGGING_STEPS")
    report_to: str = knob("", "wandb, tensorboard, swanlab or none (default: wandb when WANDB_API_KEY is set, else "
                               "none)", "REPORT_TO")
    seed: int = knob(42, "random seed", "SEED")

    def __post_init__(self) -> None:
        name = self.label
        self.data_dir = self.data_dir or self.default_data_dir("train.jsonl")
        self.train_file = self.train_file or f"{self.data_dir}/train.jsonl"
        if self.val_file == "":
            self.val_file = f"{self.data_dir}/test.jsonl"
        if not Path(self.train_file).is_file():
            raise ConfigError(f"{name}: TRAIN_FILE '{self.train_file}' not found. Write it with "
                              f"llm_training/prepare_data.py (--out-dir {self.data_dir}) or point TRAIN_FILE at a "
                              'JSONL of {"messages": [...]} rows.')
        if self.val_file is not None and not Path(self.val_file).is_file():
            raise ConfigError(f"{name}: VAL_FILE '{self.val_file}' not found; point it at a JSONL or set VAL_FILE= "
                              "(--val-file none) to train without eval.")
        self._check_at_least_one("max_len", "per_device_train_batch_size", "per_device_eval_batch_size",
                                 "grad_accum_steps", "eval_steps", "save_steps", "logging_steps")

    def resolved(self) -> ARSFTConfig:
        """The defaults that depend on the GPUs, the root and the environment, filled in."""
        gpu = self.gpus > 0
        return dataclasses.replace(
            self, **self.device_defaults(), deepspeed=self.deepspeed or ("zero2" if gpu else "none"),
            output_dir=self.output_dir or f"{Path(self.root or '.') / RUNS_DIR}/{self.run_name}",
            report_to=self.report_to or ("wandb" if os.environ.get("WANDB_API_KEY") else "none"))

    def argv(self, extra: list[str] = ()) -> list[str]:
        """The ``swift sft`` command line (of the resolved config), then ``extra``."""
        c = self.resolved()
        b, n = swift_bool, swift_number
        argv = [c.swift, "sft", "--model", c.model, "--use_hf", b(c.use_hf), "--check_model", b(c.check_model),
                "--tuner_type", "full", "--dataset", c.train_file, "--torch_dtype", c.torch_dtype,
                "--attn_impl", c.attn_impl, "--packing", b(c.packing), "--max_length", str(c.max_len),
                "--num_train_epochs", n(c.epochs), "--per_device_train_batch_size", str(c.per_device_train_batch_size),
                "--per_device_eval_batch_size", str(c.per_device_eval_batch_size),
                "--gradient_accumulation_steps", str(c.grad_accum_steps), "--learning_rate", n(c.lr),
                "--weight_decay", n(c.weight_decay), "--warmup_ratio", n(c.warmup_ratio),
                "--lr_scheduler_type", c.lr_sched, "--gradient_checkpointing", b(c.gradient_checkpointing),
                "--eval_steps", str(c.eval_steps), "--save_steps", str(c.save_steps),
                "--save_total_limit", str(c.save_total_limit), "--logging_steps", str(c.logging_steps),
                "--dataset_num_proc", str(c.dataset_num_proc), "--packing_num_proc", str(c.dataset_num_proc),
                "--dataloader_num_workers", str(c.dataloader_num_workers), "--seed", str(c.seed),
                "--output_dir", c.output_dir, "--report_to", c.report_to, "--run_name", c.run_name]
        if c.model_type:
            argv += ["--model_type", c.model_type]
        if c.template:
            argv += ["--template", c.template]
        if c.val_file is not None:
            argv += ["--val_dataset", c.val_file]
        if c.deepspeed != "none":
            argv += ["--deepspeed", c.deepspeed]
        return [*argv, *extra]


#: The resolved config of a run, beside swift's ``v<N>-<timestamp>/`` folders.
CONFIG_RECORD = "textwm_ar_sft_config.json"


def run(config: ARSFTConfig, extra: list[str] = ()) -> int:
    """Run swift with ``config`` (announcing the CPU fallback, recording the resolved config); its exit status."""
    c = config.resolved()
    name = c.label
    if c.num_gpus == 0:
        warn_no_gpu(name, f"CPU run in {c.torch_dtype} with {c.attn_impl} attention, packing={swift_bool(c.packing)}")
    print(f"{name}: {c.model} on {c.train_file} (val: {c.val_file or 'none'}) -> {c.output_dir}; {c.num_gpus} GPU(s), "
          f"{c.torch_dtype}, {c.attn_impl}", flush=True)
    Path(c.output_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(c.output_dir) / CONFIG_RECORD, dataclasses.asdict(c))
    return subprocess.run(c.argv(list(extra)), env=c.environ(), check=False).returncode


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.training.swift_sft") -> int:
    """``python -m textwm.training.swift_sft [flags] [--print-command] [-- swift arguments]``."""
    return launcher_main(ARSFTConfig, run, argv, prog, usage="", recipes=False)


if __name__ == "__main__":
    raise SystemExit(main())
