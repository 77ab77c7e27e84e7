"""The one SFT trainer: HF ``Trainer`` with a world-model objective (any registered family's: ``ar``, ``sdar``,
``wedlm``).

Built on the HF Trainer so torchrun, DeepSpeed ZeRO-2/3 and FSDP work as users expect; what it
adds is the objective's collation and loss, a progress line with tokens/s, and the resolved
config saved with every checkpoint. Run it with ``sdar/train_sft.sh`` (torchrun) or
``python sdar/train.py --config CONFIG``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from textwm.cli_checks import check_output_dir
from textwm.data.jsonl import DataError, read_json, read_jsonl, write_json
from textwm.data.schema import validate_target_row
from textwm.diffusion.noisy_stream import length_multiple
from textwm.diffusion.sdar import IGNORE_INDEX
from textwm.models.checkpoint import CheckpointError, ModelSpec, apply_spec, convert_to_family, read_spec
from textwm.models.families import get_family
from textwm.training import memory, speedups
from textwm.training.config import ConfigError, SFTConfig, save_config
from textwm.training.data import (
    ChatEncoder,
    TrainingRows,
    build_rows,
    count_tokens,
    encode_rows,
    noisy_copy_tokens,
)
from textwm.training.linear_ce import output_projection
from textwm.training.objectives import Objective, real_tokens

log = logging.getLogger(__name__)

CONFIG_FILE = "textwm_sft_config.yaml"


def resolve_attn_implementation(name: str) -> str:
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "flex_attention"
    log.warning("no CUDA device: using SDPA with dense attention masks instead of flex attention "
                "(fine for CPU-sized runs; memory grows with the square of the sequence length)")
    return "sdpa"


def _check_diffusion_fields(spec: ModelSpec, config: SFTConfig) -> None:
    """A checkpoint of the objective's own family must agree with the config on its block size."""
    if spec.block_size is not None and spec.block_size != config.block_length:
        raise CheckpointError(f"{spec.path} was trained with block_size {spec.block_size} but block_length is "
                              f"{config.block_length}; set block_length: {spec.block_size}")
    if spec.mask_token_id is None:
        raise CheckpointError(f"{spec.path}: {spec.family} checkpoint without mask_token_id in config.json")


def build_objective(config: SFTConfig, model: Any, attn_implementation: str, pad_token_id: int) -> Objective:
    """The config's objective (its family's objective class) for ``model`` (already of the objective's family: its
    mask id is read)."""
    objective = get_family(config.objective).objective_class()
    return objective.from_config(config, model, attn_implementation=attn_implementation, pad_token_id=pad_token_id)


def prepare_model(config: SFTConfig, attn_implementation: str) -> tuple[Any, Any, Objective]:
    """Load the start checkpoint and turn it into the objective's family (announced when it changes)."""

    from textwm.models import sdar, wedlm  # noqa: F401  (register the sdar, sdar_moe and wedlm model types)

    spec = read_spec(config.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # fp32 master weights; bf16 comes from the Trainer's autocast (config.bf16).
    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=torch.float32,
                                                 attn_implementation=attn_implementation)
    apply_spec(model, spec)  # what a hub config leaves out (block size, mask id), as load_model does
    pad_id = tokenizer.pad_token_id
    family = get_family(config.objective)
    if spec.family != family.name:
        mask_id = convert_to_family(model, tokenizer, family.name, config.block_length)
        log.warning(family.conversion_line(spec.path, spec.family, config.block_length, mask_id))
    elif family.masked:
        _check_diffusion_fields(spec, config)
    objective = build_objective(config, model, attn_implementation, pad_id)
    if config.loss_impl == "chunked":
        try:  # a model whose logits the chunked CE cannot reproduce fails here, not at the first step
            output_projection(model)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        log.info("loss_impl chunked: %s cross-entropy from the hidden states and the lm_head weight, chunk by chunk "
                 "(no logits tensor)", objective.name)
    else:
        log.info("loss_impl logits: %s cross-entropy from the model's logits at the loss positions", objective.name)
    if spec.stop_ids:
        model.generation_config.eos_token_id = list(spec.stop_ids)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, objective


def load_rows(path: Path, encoder: ChatEncoder, config: SFTConfig, block_size: int | None, *, what: str) -> TrainingRows:
    rows = read_jsonl(path, validate=validate_target_row).rows
    report = encode_rows(rows, encoder, cutoff_len=config.cutoff_len, truncate_mode=config.truncate_mode,
                         block_size=block_size)
    if not report.samples:
        raise DataError(f"no {what} sample left: all {len(rows)} rows are longer than cutoff_len "
                        f"({config.cutoff_len}); raise cutoff_len or use truncate_mode: cut", path=path)
    built = build_rows(report.samples, max_len=config.cutoff_len, packing=config.neat_packing)
    tokens, answer = count_tokens(built)
    log.info("%s data %s: %d rows -> %s -> %d training rows, %d tokens (%d answer)", what, path, len(rows),
             report.summary(), len(built), tokens, answer)
    return TrainingRows(built, seed=config.seed)


class WorldModelTrainer(Trainer):
    """HF Trainer whose loss comes from an :class:`Objective`."""

    def __init__(self, *args: Any, objective: Objective, sft_config: SFTConfig, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.objective = objective
        self.sft_config = sft_config
        # The objective divides by the step's answer-token count itself: the Trainer must pass that
        # count (num_items_in_batch) and must not divide by the accumulation steps again.
        self.model_accepts_loss_kwargs = True
        self.tokens_seen = 0
        self.answer_tokens_seen = 0
        # What the run trained on, in order: a sha256 chained over the answer tokens of every micro-batch (block
        # padding left out), so two runs with other objectives on the same rows can show they saw the same data
        # in the same order. Chained as hex so that a checkpoint can carry it (DATA_SEEN_FILE) across a resume.
        self.data_digest = ""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:
            self.tokens_seen += real_tokens(inputs)
            labels = inputs["labels"]
            answer = labels[(labels != IGNORE_INDEX) & (labels != self.objective.pad_token_id)]
            self.answer_tokens_seen += answer.numel()
            self.data_digest = hashlib.sha256(bytes.fromhex(self.data_digest)
                                              + answer.cpu().numpy().astype("int64").tobytes()).hexdigest()
        loss = self.objective.loss(model, inputs, num_items_in_batch)
        if (self.args.average_tokens_across_devices and num_items_in_batch is not None
                and self.accelerator.num_processes > 1):
            # DDP averages gradients over ranks while num_items_in_batch counts all ranks' tokens.
            loss = loss * self.accelerator.num_processes
        return (loss, {"loss": loss}) if return_outputs else loss

    def data_seen(self) -> dict[str, Any]:
        return {"tokens_seen": self.tokens_seen, "answer_tokens_seen": self.answer_tokens_seen,
                "data_digest": self.data_digest}


#: In every checkpoint: this rank's tokens seen and data digest up to it (restored on resume).
DATA_SEEN_FILE = "textwm_data_seen.json"


class SaveDataSeen(TrainerCallback):
    """Writes :data:`DATA_SEEN_FILE` into each checkpoint, so a resumed run's counts and digest cover every step."""

    def __init__(self, trainer: WorldModelTrainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            write_json(folder / DATA_SEEN_FILE, self.trainer.data_seen())


def restore_data_seen(trainer: WorldModelTrainer, checkpoint: Path) -> None:
    """Continue the counts and the digest from ``checkpoint`` (a warning when it predates them)."""
    path = checkpoint / DATA_SEEN_FILE
    if not path.is_file():
        log.warning("%s has no %s: tokens seen and the data digest count from the resume on", checkpoint,
                    DATA_SEEN_FILE)
        return
    seen = json.loads(path.read_text())
    trainer.tokens_seen, trainer.answer_tokens_seen = int(seen["tokens_seen"]), int(seen["answer_tokens_seen"])
    trainer.data_digest = str(seen["data_digest"])


class EpochNoise(TrainerCallback):
    """Tells the dataset which epoch it is, so each epoch draws fresh per-sample noise."""

    def __init__(self, dataset: TrainingRows):
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.dataset.epoch = math.floor(state.epoch or 0)


class ProgressLine(TrainerCallback):
    """One line per logging step: step, loss, lr, tokens/s (this rank's tokens x world size), epoch."""

    def __init__(self, trainer: WorldModelTrainer):
        self.trainer = trainer
        self._last = (time.perf_counter(), 0)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "eval_loss" in logs:
            log.info("step %d | eval loss %.4f", state.global_step, logs["eval_loss"])
        if "loss" not in logs:
            return
        now, tokens = time.perf_counter(), self.trainer.tokens_seen
        rate = (tokens - self._last[1]) / max(now - self._last[0], 1e-9) * args.world_size
        self._last = (now, tokens)
        logs["tokens_per_second"] = round(rate, 1)
        memory = ""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # The most this rank's tensors have held since the start (the allocator's count, not the reserve).
            logs["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            memory = f" | peak {logs['peak_memory_gib']:.1f} GiB"
        log.info("step %d/%d | loss %.4f | lr %.3g | %.0f tok/s | epoch %.2f%s", state.global_step, state.max_steps,
                 logs["loss"], logs.get("learning_rate", float("nan")), rate, state.epoch or 0.0, memory)


class SaveResolvedConfig(TrainerCallback):
    """Writes the resolved config into every checkpoint folder."""

    def __init__(self, config: SFTConfig):
        self.config = config

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            save_config(self.config, Path(args.output_dir) / f"checkpoint-{state.global_step}" / CONFIG_FILE)


@dataclass
class TrainResult:
    output_dir: Path
    global_step: int
    train_loss: float
    metrics: dict[str, Any]
    #: This rank's training tokens (block padding included) and answer tokens (without it).
    tokens_seen: int = 0
    answer_tokens_seen: int = 0
    #: sha256 of the answer tokens in training order (equal for two runs that saw the same data in the same order).
    data_digest: str = ""
    #: The HF Trainer's log history (loss per logging step, eval loss, ...).
    log_history: list[dict[str, Any]] = field(default_factory=list)
    #: The objective's loss on ``eval_file`` after the last step (None without an eval file). The diffusion
    #: objectives draw their masks at random, so this is one draw's estimate, seeded by the config's seed.
    eval_loss: float | None = None


def training_arguments(config: SFTConfig) -> TrainingArguments:
    has_eval = bool(config.eval_file)
    return TrainingArguments(
        output_dir=config.output_dir, learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_train_batch_size,
        per_device_eval_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps, num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps, lr_scheduler_type=config.lr_scheduler_type,
        warmup_steps=config.warmup_ratio,  # transformers 5: a float < 1 is a ratio of the total steps
        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm, optim=config.optim, bf16=config.bf16,
        # Checkpointing is applied to the layers by speedups.apply_config (modes, every n-th layer, offload).
        gradient_checkpointing=False, deepspeed=config.deepspeed or None,
        fsdp=config.fsdp or "", fsdp_config=config.fsdp_config or None, save_steps=config.save_steps,
        save_total_limit=config.save_total_limit, logging_steps=config.logging_steps, seed=config.seed,
        data_seed=config.seed, dataloader_num_workers=config.dataloader_num_workers, report_to=config.report_to,
        run_name=config.run_name or None, remove_unused_columns=False, disable_tqdm=True,
        eval_strategy="steps" if has_eval else "no", eval_steps=config.eval_steps or config.save_steps,
        label_names=["labels"], save_strategy="steps", prediction_loss_only=True,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


#: Environment variables the HF wandb callback reads, and the config fields that set them.
WANDB_ENV = {"wandb_project": "WANDB_PROJECT", "wandb_entity": "WANDB_ENTITY", "wandb_group": "WANDB_RUN_GROUP"}


def prepare_reporting_and_deepspeed(config: SFTConfig) -> None:
    """Before the HF ``TrainingArguments`` read them: the wandb fields as the environment variables its
    callback reads (the config wins, as in Tencent/WeDLM's ``wandb.init(project=...)``), and a DeepSpeed
    config generated from the paper's WeDLM keys written to ``config.deepspeed`` (every rank writes the
    same file atomically)."""

    if "wandb" in config.report_to:
        for key, env in WANDB_ENV.items():
            if getattr(config, key):
                os.environ[env] = getattr(config, key)
    if config._generated_deepspeed is not None:
        Path(config.deepspeed).parent.mkdir(parents=True, exist_ok=True)
        write_json(config.deepspeed, config._generated_deepspeed)
        log.info("DeepSpeed config from the paper's use_deepspeed/deepspeed_* keys -> %s", config.deepspeed)


def check_memory(model: Any, config: SFTConfig, rows: TrainingRows, attn_implementation: str) -> None:
    """``memory_check``: this rank's estimated peak (:mod:`textwm.training.memory`) against its GPU."""
    if config.memory_check == "off":
        return
    if not torch.cuda.is_available():
        log.info("memory check: no CUDA device, nothing to check")
        return

    tile = 128 if attn_implementation == "flex_attention" else 1
    longest = max(len(r) for r in rows.rows)
    tokens, answer = count_tokens(rows.rows)
    ds = (config._generated_deepspeed or read_json(config.deepspeed)) if config.deepspeed else None
    noisy = None
    if get_family(config.objective).objective_class().noisy_copy:
        most = max(noisy_copy_tokens(r, config.block_length) for r in rows.rows)
        noisy = -(-most // length_multiple(attn_implementation)) * length_multiple(attn_implementation)
    plan = memory.plan_for(config, row_tokens=-(-longest // tile) * tile, answer_share=answer / max(tokens, 1),
                           noisy_tokens=noisy,
                           world_size=int(os.environ.get("WORLD_SIZE", "1")), deepspeed_config=ds)
    device = torch.cuda.current_device()
    # Several trainings sharing one GPU (the comparison's --parallel) each get their share of it.
    device_bytes = torch.cuda.get_device_properties(device).total_memory * config.memory_share
    fits, line = memory.check_fits(memory.ModelShape.of(model), plan, device_bytes, on_fail=config.memory_check)
    (log.info if fits else log.warning)(line)


def train(config: SFTConfig) -> TrainResult:
    """Run SFT as configured; returns where the final model is and the training loss."""

    check_output_dir(config.output_dir, "output_dir")  # before loading anything: a bad path fails in a second
    for what, path in (("train_file", config.resolve_train_file()), ("eval_file", config.eval_file)):
        if path and not Path(path).is_file():
            raise DataError(f"{what} {path} not found")
    speedups.check_packages(config)
    attn = resolve_attn_implementation(config.attn_implementation)
    model, tokenizer, objective = prepare_model(config, attn)
    encoder = ChatEncoder(tokenizer)
    train_rows = load_rows(config.resolve_train_file(), encoder, config, objective.block_size, what="train")
    eval_rows = (load_rows(Path(config.eval_file), encoder, config, objective.block_size, what="eval")
                 if config.eval_file else None)
    prepare_reporting_and_deepspeed(config)
    check_memory(model, config, train_rows, attn)
    for line in speedups.apply_config(model, config):
        log.info(line)
    args = training_arguments(config)
    if args.n_gpu > 1:
        raise CheckpointError(
            f"{args.n_gpu} GPUs are visible to a single process; launch one process per GPU with torchrun "
            f"(NUM_GPUS={args.n_gpu} sdar/train_sft.sh) or pick one GPU with CUDA_VISIBLE_DEVICES=0")
    trainer = WorldModelTrainer(model=model, args=args, train_dataset=train_rows, eval_dataset=eval_rows,
                                data_collator=objective.collate, processing_class=tokenizer, objective=objective,
                                sft_config=config)
    trainer.add_callback(EpochNoise(train_rows))
    trainer.add_callback(ProgressLine(trainer))
    trainer.add_callback(SaveResolvedConfig(config))
    trainer.add_callback(SaveDataSeen(trainer))
    out = Path(config.output_dir)
    if trainer.is_world_process_zero():
        save_config(config, out / CONFIG_FILE)
    resume = config.resume_from_checkpoint
    if resume is True and not any(out.glob("checkpoint-*")):
        log.warning("resume_from_checkpoint: true but %s has no checkpoint yet; starting fresh", out)
        resume = None
    if resume:

        restore_data_seen(trainer, Path(get_last_checkpoint(str(out)) if resume is True else resume))
    result = trainer.train(resume_from_checkpoint=resume)
    final = out / config.final_dir if config.final_dir else out
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        save_config(config, final / CONFIG_FILE)
    log.info("training done: %d steps, train loss %.4f -> %s", result.global_step, result.training_loss, final)
    eval_loss = None
    if eval_rows is not None:
        torch.manual_seed(config.seed)     # the same masks for every evaluation of the same rows
        eval_loss = float(trainer.evaluate()["eval_loss"])
        log.info("eval loss after the last step: %.4f", eval_loss)
    return TrainResult(output_dir=final, global_step=result.global_step, train_loss=result.training_loss,
                       metrics=dict(result.metrics), tokens_seen=trainer.tokens_seen,
                       answer_tokens_seen=trainer.answer_tokens_seen, data_digest=trainer.data_digest,
                       log_history=list(trainer.state.log_history), eval_loss=eval_loss)
