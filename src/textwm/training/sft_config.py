"""The one typed config of the SFT trainer (:class:`SFTConfig`) and its constants; read from YAML by
:func:`textwm.training.config.load_config`.

Keys follow the paper's LlamaFactory configs where they apply (``model_name_or_path``,
``dataset``/``train_file``, ``template``, ``block_length``, ``cutoff_len``, ``truncate_mode``,
``neat_packing``, ``learning_rate``, ...). LlamaFactory keys that have no meaning here (``stage``,
``finetuning_type``, ...) are accepted and listed in a warning; any other unknown key is an error
that names the closest valid key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textwm import config
from textwm.config import ConfigError
from textwm.data.jsonl import DataError, read_json
from textwm.models.families import family_names, get_family
from textwm.training.deepspeed_paths import resolve_deepspeed

log = logging.getLogger(__name__)

#: The built-in objectives (a model family each); ``family_names()`` also lists families registered later.
OBJECTIVES = tuple(family_names())
#: WeDLM loss normalisations (:mod:`textwm.diffusion.wedlm`).
WEDLM_LOSS_NORMALISATIONS = ("step_tokens", "micro_batch")
#: WeDLM weightings of the masked-token term (Tencent/WeDLM ``finetune/src/loss.py`` ``compute_mlm_loss``).
WEDLM_LOSS_WEIGHTINGS = ("weighted", "uniform")
TRUNCATE_MODES = ("drop", "cut")
#: ``memory_check`` values (:mod:`textwm.training.memory`).
MEMORY_CHECKS = ("error", "warn", "off")
#: ``gradient_checkpointing_mode`` values (:mod:`textwm.training.speedups`).
CHECKPOINT_MODES = ("full", "ops")
#: How the objectives take the cross-entropy (:mod:`textwm.training.linear_ce`): ``logits`` or ``chunked``.
LOSS_IMPLS = ("logits", "chunked")

#: LlamaFactory keys of the paper's configs that this trainer does not need (accepted, warned about).
IGNORED_LLAMAFACTORY_KEYS = frozenset({
    "stage", "do_train", "finetuning_type", "train_from_scratch", "trust_remote_code", "freeze_vision_tower",
    "freeze_multi_modal_projector", "freeze_language_model", "use_dft_loss", "overwrite_cache", "tokenized_path",
    "preprocessing_num_workers", "plot_loss", "overwrite_output_dir", "save_only_model", "ddp_timeout",
    "include_effective_tokens_per_second",
})


@dataclass
class SFTConfig:
    """Supervised fine-tuning of a world model with a family's objective (AR, SDAR, WeDLM, ...)."""

    model_name_or_path: str = field(default="", metadata={"help": "checkpoint folder (or hub id) to start from"})
    objective: str = field(default="sdar", metadata={
        "help": "ar (next-token CE), sdar (block diffusion) or wedlm (mask recovery under causal attention)"})
    train_file: str = field(default="", metadata={"help": "chat JSONL to train on (rows end with the target)"})
    dataset: str = field(default="", metadata={"help": "LlamaFactory style: a name in <dataset_dir>/dataset_info.json"})
    dataset_dir: str = field(default="data", metadata={"help": "folder of dataset_info.json (with `dataset`)"})
    eval_file: str = field(default="", metadata={"help": "optional chat JSONL for the eval loss"})
    template: str = field(default="auto", metadata={"help": "prompt template; the checkpoint's chat template is used"})
    block_length: int = field(default=4, metadata={
        "help": "SDAR block size (must equal the model's block_size); WeDLM: the block of each masking ratio (32)"})
    cutoff_len: int = field(default=2048, metadata={"help": "max tokens per sample (and per packed row)"})
    truncate_mode: str = field(default="drop", metadata={
        "help": "sample longer than cutoff_len: drop it (counted) or cut the prompt's start to fit"})
    neat_packing: bool = field(default=False, metadata={
        "help": "pack samples into rows of cutoff_len tokens without cross-sample attention"})
    output_dir: str = field(default="runs/sft", metadata={"help": "checkpoints, logs and the resolved config"})
    learning_rate: float = field(default=1e-5, metadata={"help": "peak learning rate"})
    per_device_train_batch_size: int = field(default=1, metadata={"help": "rows per device per micro-batch"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    num_train_epochs: float = field(default=1.0, metadata={"help": "passes over the data"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many optimizer steps (-1: epochs decide)"})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "HF scheduler name, e.g. constant_with_warmup"})
    warmup_ratio: float = field(default=0.0, metadata={"help": "share of steps for linear warm-up"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    optim: str = field(default="adamw_torch", metadata={"help": "HF optimizer name"})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision (GPU)"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations to save memory"})
    gradient_checkpointing_mode: str = field(default="full", metadata={
        "help": "full (a layer keeps only its input) or ops (selective: keep matmul and attention outputs, "
                "recompute norms, SwiGLU and RoPE)"})
    gradient_checkpointing_every: int = field(default=1, metadata={
        "help": "checkpoint every N-th decoder layer (1: all; 2: half of them, the rest keep their activations)"})
    activation_offload: bool = field(default=False, metadata={
        "help": "hold what the decoder layers save for the backward in pinned host memory (with checkpointing: "
                "only the layer inputs); slower, frees GPU memory"})
    enable_liger_kernel: bool = field(default=False, metadata={
        "help": "liger-kernel's fused RMSNorm, RoPE and SwiGLU (GPU; pip install liger-kernel)"})
    torch_compile: bool = field(default=False, metadata={"help": "torch.compile each decoder layer (regional)"})
    memory_check: str = field(default="error", metadata={
        "help": "before the first step, estimate this rank's GPU memory: error (stop with what to change when it "
                "will not fit), warn, or off"})
    memory_share: float = field(default=1.0, metadata={
        "help": "share of the GPU's memory this process may use, for memory_check (several trainings on one GPU)"})
    attn_implementation: str = field(default="auto", metadata={
        "help": "auto (flex_attention on CUDA, sdpa on CPU), flex_attention, sdpa or eager"})
    deepspeed: str = field(default="", metadata={"help": "DeepSpeed JSON config (ZeRO-2/3), e.g. sdar/configs/ds_z3.json"})
    fsdp: str = field(default="", metadata={"help": "HF/accelerate FSDP spec, e.g. 'full_shard auto_wrap'"})
    fsdp_config: dict = field(default_factory=dict, metadata={"help": "FSDP options (see HF TrainingArguments)"})
    save_steps: int = field(default=500, metadata={"help": "checkpoint every N optimizer steps"})
    save_total_limit: int | None = field(default=None, metadata={"help": "keep at most N checkpoints"})
    logging_steps: int = field(default=10, metadata={"help": "progress line every N optimizer steps"})
    eval_steps: int | None = field(default=None, metadata={"help": "eval loss every N steps (with eval_file)"})
    seed: int = field(default=42, metadata={"help": "seed of init order, shuffling and noise"})
    mask_eps: float = field(default=1e-3, metadata={"help": "SDAR: lower bound of the masking probability"})
    wedlm_loss_normalisation: str = field(default="step_tokens", metadata={
        "help": "WeDLM: step_tokens (both terms / the step's answer tokens: the same gradient however the step is "
                "split into micro-batches and ranks) or micro_batch (Tencent/WeDLM finetune: MLM / the micro-batch's "
                "sum of 1/gamma, AR / its answer tokens, micro-batches averaged)"})
    wedlm_loss_weighting: str = field(default="weighted", metadata={
        "help": "WeDLM masked-token term: weighted (each mask's CE times 1/gamma, the paper's) or uniform (plain "
                "CE; Tencent/WeDLM loss_weighting_scheme)"})
    wedlm_ar_loss_weight: float = field(default=1.0, metadata={
        "help": "WeDLM: weight w of the AR term, loss (mlm + w * ar) / (1 + w); 0 turns the AR term off "
                "(Tencent/WeDLM ar_loss_weight, enable_ar_loss: false)"})
    loss_impl: str = field(default="logits", metadata={
        "help": "logits (the model's logits at the loss positions, then cross-entropy) or chunked (the same losses "
                "from the hidden states and the lm_head weight, chunk by chunk: no [positions, vocab] float32 "
                "logits kept for the backward pass)"})
    dataloader_num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes"})
    resume_from_checkpoint: Any = field(default=None, metadata={
        "help": "null, true (latest checkpoint in output_dir) or a checkpoint path"})
    report_to: str = field(default="none", metadata={"help": "none, tensorboard, wandb, ..."})
    run_name: str = field(default="", metadata={"help": "name shown by the reporting tool"})
    wandb_project: str = field(default="", metadata={"help": "with report_to wandb: its project (WANDB_PROJECT)"})
    wandb_entity: str = field(default="", metadata={"help": "with report_to wandb: its team (WANDB_ENTITY)"})
    wandb_group: str = field(default="", metadata={"help": "with report_to wandb: its run group (WANDB_RUN_GROUP)"})
    final_dir: str = field(default="", metadata={
        "help": "sub-folder of output_dir for the final model ('': output_dir itself; the paper's WeDLM runs: final)"})
    #: A DeepSpeed config generated from the paper's WeDLM keys (``paper_keys``), written by the trainer to
    #: ``deepspeed`` before it starts; set by code, never by users, and not saved with the config.
    _generated_deepspeed: dict | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.model_name_or_path:
            raise ConfigError("model_name_or_path is required")
        if self.objective not in family_names():
            raise ConfigError(f"objective must be one of {', '.join(family_names())}, got {self.objective!r}")
        if bool(self.train_file) == bool(self.dataset):
            raise ConfigError("give exactly one of train_file (a JSONL path) or dataset (a name in "
                              "<dataset_dir>/dataset_info.json)")
        if self.wedlm_loss_normalisation not in WEDLM_LOSS_NORMALISATIONS:
            raise ConfigError(f"wedlm_loss_normalisation must be one of {', '.join(WEDLM_LOSS_NORMALISATIONS)}, "
                              f"got {self.wedlm_loss_normalisation!r}")
        if self.wedlm_loss_weighting not in WEDLM_LOSS_WEIGHTINGS:
            raise ConfigError(f"wedlm_loss_weighting must be one of {', '.join(WEDLM_LOSS_WEIGHTINGS)}, "
                              f"got {self.wedlm_loss_weighting!r}")
        if not self.wedlm_ar_loss_weight >= 0:
            raise ConfigError(f"wedlm_ar_loss_weight must be >= 0 (0 turns the AR term off), got "
                              f"{self.wedlm_ar_loss_weight}")
        if self.loss_impl not in LOSS_IMPLS:
            raise ConfigError(f"loss_impl must be one of {', '.join(LOSS_IMPLS)}, got {self.loss_impl!r}")
        if self.gradient_checkpointing_mode not in CHECKPOINT_MODES:
            raise ConfigError(f"gradient_checkpointing_mode must be one of {', '.join(CHECKPOINT_MODES)}, got "
                              f"{self.gradient_checkpointing_mode!r}")
        if self.gradient_checkpointing_every < 1:
            raise ConfigError(f"gradient_checkpointing_every must be >= 1, got {self.gradient_checkpointing_every}")
        if not 0 < self.memory_share <= 1:
            raise ConfigError(f"memory_share must be in (0, 1], got {self.memory_share}")
        if self.memory_check not in MEMORY_CHECKS:
            raise ConfigError(f"memory_check must be one of {', '.join(MEMORY_CHECKS)}, got {self.memory_check!r}")
        if self.activation_offload and self.torch_compile:
            raise ConfigError("activation_offload and torch_compile cannot be combined (saved-tensor hooks around "
                              "compiled layers); choose one")
        if Path(self.final_dir).is_absolute() or ".." in Path(self.final_dir).parts:
            raise ConfigError(f"final_dir must be a sub-folder of output_dir (a relative path), got {self.final_dir!r}")
        if self.truncate_mode not in TRUNCATE_MODES:
            raise ConfigError(f"truncate_mode must be one of {', '.join(TRUNCATE_MODES)}, got {self.truncate_mode!r}")
        if self.block_length < 1:
            raise ConfigError(f"block_length must be >= 1, got {self.block_length}")
        if get_family(self.objective).block_causal and self.cutoff_len % self.block_length:
            raise ConfigError(f"cutoff_len ({self.cutoff_len}) must be a multiple of block_length "
                              f"({self.block_length}) for the {self.objective.upper()} objective")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "logging_steps",
                     "save_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not 0.0 < self.mask_eps < 1.0:
            raise ConfigError(f"mask_eps must be in (0, 1), got {self.mask_eps}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ConfigError(f"max_steps must be -1 (the epochs decide) or >= 1, got {self.max_steps}")
        if self.max_steps == -1 and not self.num_train_epochs > 0:
            raise ConfigError(f"num_train_epochs must be > 0 when max_steps is -1 (got {self.num_train_epochs}): "
                              "the run would train nothing")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ConfigError(f"weight_decay and max_grad_norm must be >= 0, got {self.weight_decay} and "
                              f"{self.max_grad_norm}")
        if self.deepspeed and self.fsdp:
            raise ConfigError("choose deepspeed or fsdp, not both")
        if self.deepspeed and self._generated_deepspeed is None:
            self.deepspeed = resolve_deepspeed(self.deepspeed)

    def resolve_train_file(self) -> Path:
        """The training JSONL: ``train_file``, or ``dataset`` looked up in ``dataset_info.json``."""
        if self.train_file:
            return Path(self.train_file)

        info_path = Path(self.dataset_dir) / "dataset_info.json"
        info = read_json(info_path)
        if self.dataset not in info:
            raise DataError(f"no dataset named {self.dataset!r} (known: {', '.join(sorted(info))})", path=info_path)
        entry = info[self.dataset]
        if "file_name" not in entry:
            raise DataError(f"entry {self.dataset!r} has no file_name", path=info_path)
        return Path(self.dataset_dir) / entry["file_name"]

    def to_dict(self) -> dict[str, Any]:
        return config.config_dict(self)
