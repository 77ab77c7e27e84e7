"""The ``pretrained`` regime of the world-model comparison: the paper's recipe at a size one GPU can run.

Every arm starts from the same pretrained AR model (``ComparisonConfig.init``: a start name such as
``smollm2-135m-instruct``, :mod:`textwm.models.pretrained`, or a checkpoint folder): the AR arm is fine-tuned
from it, the SDAR (block 4) and WeDLM arms are converted from it by the trainer (a mask token and its
embedding row added, announced in the log) and then fine-tuned, on the same rows in the same order.

Each arm trains epoch by epoch until its held-out loss stops improving: one trainer run per epoch, resumed from
the previous epoch's checkpoint (a constant learning rate after a warm-up, so that the schedule does not depend
on when the arm stops), the objective's loss on the held-out rows after each epoch, and a stop once it has not
improved for ``patience`` epochs or at ``max_epochs``. Every epoch's model is kept and decoded greedily on the
held-out rows (SDAR at each of ``sdar_denoising_steps`` steps per block), so the report has the decoded metrics
of every epoch, the best (lowest held-out loss) and the last. The best epoch's model is also sampled at each of
``temperatures`` for diversity against fidelity (Self-BLEU and Distinct-n against ROUGE-L).

Every stage is recorded in the run's ``state.json`` and resumes: an arm's epochs are recorded in
``arms/<arm>/epochs.json`` as they finish, so a run cut short (a GPU lease's limit) continues at the next epoch.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

from textwm.data.jsonl import write_json
from textwm.experiments.common import BLOCKS, ComparisonError
from textwm.experiments.decodings import empty_share, sampled_diversity
from textwm.experiments.stages import Stage
from textwm.generation.runner import EvalGenerateConfig, run_passes
from textwm.generation.settings import DecodeSettings
from textwm.metrics.scorer import ScoreOptions, score_file
from textwm.models.checkpoint import read_spec
from textwm.models.pretrained import is_start_name, pretrained_path, read_start_record
from textwm.training.config import SFTConfig

#: The file of an arm's finished epochs, beside its checkpoints.
EPOCHS_FILE = "epochs.json"
#: Bootstrap resamples of MAUVE per scored decoding (each a MAUVE call).
MAUVE_RESAMPLES = 10


def start_record(comparison: Any) -> dict[str, Any]:
    """The ``init`` step: resolve the start (made in the cache on first use) and record what it is."""

    init = comparison.config.init
    path = pretrained_path(init) if is_start_name(init) else Path(init)
    spec = read_spec(path)
    if spec.family != "ar":
        raise ComparisonError(f"--init {init}: a {spec.family} checkpoint; the regime starts from an AR model (the "
                              "SDAR and WeDLM arms are converted from it)")
    # heavy: safetensors' torch reader
    from safetensors import safe_open

    parameters = 0
    for shard in sorted(Path(spec.path).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            parameters += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    record = read_start_record(path) or {}
    return {"start": init, "path": str(path), "model_type": spec.model_type, "parameters": parameters,
            "source": record.get("source", "folder"), "vocabulary": _vocabulary(path)}


def _vocabulary(path: Path) -> int:
    # heavy: loads transformers
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(path))


def start_path(comparison: Any) -> Path:
    return Path(comparison.done["init"]["path"])


def steps_per_epoch(comparison: Any) -> int:
    """Optimizer steps of one pass over the training rows (one row a sample, no packing, one process)."""
    return math.ceil(comparison.done["data"]["train_rows"] / comparison.config.batch_size)


def _epochs(folder: Path) -> list[dict[str, Any]]:
    path = folder / EPOCHS_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def should_stop(eval_losses: list[float], patience: int) -> bool:
    """No improvement on the best held-out loss for ``patience`` epochs."""
    best = min(range(len(eval_losses)), key=eval_losses.__getitem__)
    return len(eval_losses) - 1 - best >= patience


def train_by_epochs(comparison: Any, arm: Any) -> dict[str, Any]:
    """Train ``arm`` epoch by epoch (module docstring); returns the arm's record (the comparison's train record:
    its figures are the last epoch's, its ``epochs`` every epoch's)."""
    # heavy: loads torch
    import torch

    # heavy: loads torch and transformers
    from textwm.training.trainer import train

    c = comparison.config
    folder = comparison.path("arms", arm.folder)
    folder.mkdir(parents=True, exist_ok=True)
    epochs = _epochs(folder)
    per_epoch = steps_per_epoch(comparison)
    cuda = torch.cuda.is_available()
    fast = dict(bf16=True, loss_impl="chunked", optim="adamw_torch_fused", torch_compile=True) if cuda else {}
    # Arms trained at once share the GPU: each trainer's memory check holds it to its share, so a wave that cannot
    # fit stops before its first step with what to change, not out of memory in the middle.
    fast["memory_share"] = 1 / c.parallel
    while not epochs or (len(epochs) < c.max_epochs and not should_stop([e["eval_loss"] for e in epochs], c.patience)):
        epoch = len(epochs) + 1
        comparison.echo(f"train/{arm.name}: epoch {epoch} of at most {c.max_epochs} ({per_epoch} steps) ...")
        started = time.perf_counter()
        # Each epoch's run plans `epoch` epochs; a warm-up ratio of 0.05 / epoch keeps the warm-up at the same 5% of
        # the first epoch's steps in every run, so the resumed schedule is the one the first run began.
        result = train(SFTConfig(
            model_name_or_path=str(start_path(comparison)), objective=arm.family,
            train_file=str(comparison.path("data", "wm_train.jsonl")),
            eval_file=str(comparison.path("data", "eval_test.jsonl")), output_dir=str(folder),
            final_dir=f"epoch{epoch}", cutoff_len=c.cutoff_len, truncate_mode="cut", neat_packing=False,
            learning_rate=c.learning_rate, per_device_train_batch_size=c.batch_size, num_train_epochs=epoch,
            max_steps=-1, lr_scheduler_type="constant_with_warmup", warmup_ratio=0.05 / epoch,
            logging_steps=max(1, per_epoch // 20), save_steps=per_epoch, save_total_limit=1,
            eval_steps=10 * per_epoch * c.max_epochs,     # the trainer's eval after the last step is the one used
            resume_from_checkpoint=True if any(folder.glob("checkpoint-*")) else None,
            block_length=BLOCKS[arm.family], seed=c.seed, **fast))
        curve = [(h["step"], h["loss"]) for h in result.log_history if "loss" in h and "step" in h]
        epochs.append({"epoch": epoch, "steps": result.global_step, "eval_loss": round(result.eval_loss, 5),
                       "train_loss": round(sum(loss for s, loss in curve if s > (epoch - 1) * per_epoch)
                                           / max(1, sum(1 for s, _ in curve if s > (epoch - 1) * per_epoch)), 5),
                       "tokens_seen": result.tokens_seen, "answer_tokens_seen": result.answer_tokens_seen,
                       "data_digest": result.data_digest, "loss_curve": curve,
                       "seconds": round(time.perf_counter() - started, 1),
                       "train_samples_per_second": result.metrics.get("train_samples_per_second")})
        write_json(folder / EPOCHS_FILE, epochs)
        comparison.echo(f"train/{arm.name}: epoch {epoch}: held-out loss {result.eval_loss:.4f}")
    losses = [e["eval_loss"] for e in epochs]
    best = min(range(len(losses)), key=losses.__getitem__) + 1
    stopped = "held-out loss stopped improving" if should_stop(losses, c.patience) else f"max_epochs {c.max_epochs}"
    last = epochs[-1]
    # The comparison's same-data check reads the first epoch (every arm trains at least one, on the same rows).
    return {"steps": last["steps"], "epochs_trained": len(epochs), "best_epoch": best, "stopped_because": stopped,
            "train_seconds": round(sum(e.get("seconds") or 0 for e in epochs), 1),
            "train_loss": last["train_loss"], "last_run_train_loss": last["train_loss"],
            "tokens_seen": epochs[0]["tokens_seen"], "answer_tokens_seen": epochs[0]["answer_tokens_seen"],
            "data_digest": epochs[0]["data_digest"], "loss_curve": [p for e in epochs for p in e["loss_curve"]],
            "epochs": [{k: v for k, v in e.items() if k != "loss_curve"} for e in epochs],
            "train_samples_per_second": last["train_samples_per_second"]}


# --- decoding -------------------------------------------------------------------------------------------------


def greedy_passes(comparison: Any, arm: Any) -> list[tuple[str, int]]:
    """(pass name, SDAR denoising steps per block) of an epoch's greedy decoding."""
    if arm.family == "sdar":
        return [(f"greedy_s{steps}", steps) for steps in comparison.config.sdar_denoising_steps]
    return [("greedy", comparison.config.sdar_denoising_steps[0])]


def _decode(comparison: Any, model: Path, folder: Path, passes: list[tuple[str, float, int | None, int]]) -> None:
    # heavy: loads torch
    import torch

    c = comparison.config
    shutil.rmtree(folder, ignore_errors=True)      # a decoding cut short is redone whole
    run_passes([EvalGenerateConfig(
        model_path=str(model), data_dir=str(comparison.path("data")), datasets=["test"],
        output_dir=str(folder / name), num_gpus=1 if torch.cuda.is_available() else 0, per_batch=c.per_batch,
        decode=DecodeSettings(gen_length=c.gen_length, block_length=BLOCKS["sdar"], denoising_steps=steps,
                              temperature=temperature, seed=seed))
        for name, temperature, seed, steps in passes])


def _rates(folder: Path, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        summary = json.loads((folder / name / "eval_generate_config.json").read_text())
        out[name] = {"decode_tokens_per_second": summary["decode_tokens_per_second"],
                     "decode_seconds": summary["decode_seconds"], "generated_tokens": summary["generated_tokens"]}
    return out


def generate_epoch(comparison: Any, arm: Any, epoch: int) -> dict[str, Any]:
    """Greedy decodings of the held-out rows by the arm's model after ``epoch``."""
    folder = comparison.path("eval", arm.folder, f"epoch{epoch}")
    passes = greedy_passes(comparison, arm)
    _decode(comparison, comparison.path("arms", arm.folder, f"epoch{epoch}"), folder,
            [(name, 0.0, None, steps) for name, steps in passes])
    return {"passes": _rates(folder, [name for name, _ in passes])}


def sample_names(comparison: Any) -> list[tuple[str, float, int]]:
    """(pass name, temperature, seed) of the best epoch's sampled decodings."""
    c = comparison.config
    return [(f"t{t:g}_sample_{k}", t, c.seed + k) for t in c.temperatures for k in range(c.samples)]


def generate_samples(comparison: Any, arm: Any) -> dict[str, Any]:
    """``samples`` decodings per prompt at each temperature by the best epoch's model (SDAR at the first of
    ``sdar_denoising_steps``)."""
    best = comparison.done[f"train/{arm.name}"]["best_epoch"]
    folder = comparison.path("eval", arm.folder, "sampled")
    steps = comparison.config.sdar_denoising_steps[0]
    names = sample_names(comparison)
    _decode(comparison, comparison.path("arms", arm.folder, f"epoch{best}"), folder,
            [(name, t, seed, steps) for name, t, seed in names])
    return {"epoch": best, "passes": _rates(folder, [name for name, _, _ in names])}


def generate_stages(comparison: Any, arm: Any) -> list[Stage]:
    """Every trained epoch's greedy decodings, then the best epoch's samples (a stage each)."""
    train = f"train/{arm.name}"
    epochs = [Stage(f"generate/{arm.name}/epoch{epoch}", lambda e=epoch: generate_epoch(comparison, arm, e), after=(train,))
              for epoch in range(1, comparison.done[train]["epochs_trained"] + 1)]
    return [*epochs, Stage(f"generate/{arm.name}/sampled", lambda: generate_samples(comparison, arm), after=(train,))]


# --- scoring ------------------------------------------------------------------------------------------------------


def score_arm(comparison: Any, arm: Any) -> dict[str, Any]:
    """Every epoch's greedy scores (with bootstrap intervals), and diversity against fidelity per temperature."""

    c = comparison.config
    # MAUVE's interval costs one MAUVE call (~10 s for 1,000 rows on 2 cores) per resample: a few suffice for its
    # width, which the summary reports beside the resample count.
    options = ScoreOptions(mauve_max_samples=c.eval_rows, bootstrap=c.bootstrap, mauve_resamples=MAUVE_RESAMPLES,
                           bootstrap_seed=c.seed)
    train = comparison.done[f"train/{arm.name}"]
    epochs = []
    for epoch in range(1, train["epochs_trained"] + 1):
        folder = comparison.path("eval", arm.folder, f"epoch{epoch}")
        passes = {}
        for name, _ in greedy_passes(comparison, arm):
            outputs = folder / name / "test_outputs.jsonl"
            passes[name] = {"scores": score_file("test", outputs, folder / name, options),
                            "empty_share": empty_share(outputs)}
        epochs.append({"epoch": epoch, "eval_loss": train["epochs"][epoch - 1]["eval_loss"], "passes": passes})
    folder = comparison.path("eval", arm.folder, "sampled")
    sweep = []
    for t in c.temperatures:
        names = [name for name, temp, _ in sample_names(comparison) if temp == t]
        rouge = [score_file("test", folder / n / "test_outputs.jsonl", folder / n,
                            ScoreOptions(compute_mauve=False))["rouge_l_f1"] for n in names]
        sweep.append({"temperature": t, "rouge_l_f1": round(sum(rouge) / len(rouge), 4),
                      **sampled_diversity([folder / n / "test_outputs.jsonl" for n in names])})
    return {"epochs": epochs, "best_epoch": train["best_epoch"], "temperature_sweep": sweep}
