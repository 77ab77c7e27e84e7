"""Loss-only evaluation of an AR world-model checkpoint with ms-swift: teacher-forced cross-entropy and token
accuracy on the assistant turns of each eval JSONL (no generation; for exact match, ROUGE, etc. serve the model and
run ``llm_training/evaluate.py``).

ms-swift has no eval-only SFT mode, so each file is one ``swift sft`` call for zero epochs with
``--eval_on_start true`` that saves nothing. Every knob is a field of :class:`EvalLossConfig` with the default and
the environment variable that ``llm_training/eval.sh`` has always read (``MODEL_DIR``, ``EVAL_FILES``, ``NUM_GPUS``,
...), so the script only finds this checkout's Python and runs

    python -m textwm.training.swift_eval [--flag VALUE ...] [--print-command] [-- extra swift arguments]

(``textwm eval loss`` is the same). Extra arguments are appended to every swift line. ``MODEL_DIR`` is a checkpoint,
a hub id, or a ``train.sh`` ``OUTPUT_DIR`` (then its newest ``last-checkpoint``); the paper's ``./output/<run>``
finds ``runs/llm_training/<run>``. Per file it writes ``$OUTPUT_DIR/<file stem>/logging.jsonl``, and one row per
file to ``$OUTPUT_DIR/eval_loss.tsv``.

Tiny CPU run (after the tiny run of :mod:`textwm.training.swift_sft`; ~10 s a file)::

    python -m textwm.training.swift_eval --num-gpus 0 --model-dir runs/llm_training/ar_sft --model-type qwen3 \\
        --template qwen3 --val-file runs/ar_data/test.jsonl
"""

from __future__ import annotations

import dataclasses
import glob
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textwm.config import ConfigError
from textwm.data.jsonl import write_json
from textwm.swift_launch import knob, launcher_main, swift_bool, warn_no_gpu
from textwm.training.swift_sft import RUNS_DIR, ARSwiftConfig

#: The summary of a run: one row per eval file.
SUMMARY = "eval_loss.tsv"
SUMMARY_HEADER = ("file", "eval_loss", "eval_token_acc")
#: The resolved config of a run, beside the summary.
CONFIG_RECORD = "textwm_eval_loss_config.json"
#: The paper's train.sh wrote to ``llm_training/output/<run>``; ours writes to ``runs/llm_training/<run>``.
PAPER_OUTPUT = re.compile(r"^(\./)?output/")


def _version_key(path: Path) -> list:
    """Order of ``sort -V``: runs of digits compare as numbers (``v10-...`` after ``v9-...``)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _stem(path: str) -> str:
    """``basename PATH .jsonl``."""
    name = Path(path).name
    return name[:-len(".jsonl")] if name.endswith(".jsonl") and name != ".jsonl" else name


@dataclass
class EvalLossConfig(ARSwiftConfig):
    """Loss-only eval of an AR world model with ms-swift (swift sft, zero epochs): llm_training/eval.sh."""

    module: ClassVar[str] = "textwm.training.swift_eval"

    model_dir: str = knob("", "checkpoint, hub id, or a train.sh OUTPUT_DIR (its newest last-checkpoint) (default: "
                               "<root>/runs/llm_training/ar_sft)", "MODEL_DIR")
    val_file: str = knob("", "file to evaluate (default: <data_dir>/test.jsonl)", "VAL_FILE")
    eval_files: str = knob("", "space-separated JSONL files (shell patterns expand), each evaluated on its own "
                                "(default: VAL_FILE)", "EVAL_FILES")
    output_dir: str = knob("", "per-file logging.jsonl and eval_loss.tsv, replaced by a rerun (default: "
                                "<checkpoint>/eval_loss; a hub id: <root>/runs/llm_training/eval_loss; eval.sh also "
                                "reads the paper's OUTPUT_BASE)", "OUTPUT_DIR")
    master_port: int = knob(29501, "torchrun port (NUM_GPUS > 1)", "MASTER_PORT")
    deepspeed: str = knob("none", "zero3 shards a model too large for one GPU; none: off", "DEEPSPEED")

    def __post_init__(self) -> None:
        root = Path(self.root or ".")
        self.model_dir = self.model_dir or str(root / RUNS_DIR / "ar_sft")
        self.data_dir = self.data_dir or self.default_data_dir("test.jsonl")
        self.val_file = self.val_file or f"{self.data_dir}/test.jsonl"
        self.eval_files = self.eval_files or self.val_file
        self.checkpoint()          # MODEL_DIR names a model
        for path in self.files():
            if not Path(path).is_file():
                raise ConfigError(f"{self.label}: eval file '{path}' not found (set "
                                  "VAL_FILE or EVAL_FILES)")
        self._check_at_least_one("max_len", "per_device_eval_batch_size")

    def paper_run_dir(self) -> str:
        """``runs/llm_training/<run>`` under the root when MODEL_DIR is the paper's missing ``./output/<run>`` and that
        folder exists (train.sh writes there), else empty."""
        if Path(self.model_dir).exists() or not PAPER_OUTPUT.match(self.model_dir):
            return ""
        ours = Path(self.root or ".") / RUNS_DIR / Path(self.model_dir).name
        return str(ours) if ours.is_dir() else ""

    def checkpoint(self) -> str:
        """The model swift loads: MODEL_DIR itself (a checkpoint with config.json, or a hub id), or the newest
        ``last-checkpoint`` of a train.sh OUTPUT_DIR, its real path.

        Raises:
            ConfigError: a folder without either, or a path that does not exist.
        """
        name = self.label
        model_dir, moved = self.model_dir, self.paper_run_dir()
        note = f" ({model_dir} is not here; using train.sh's {moved})" if moved else ""
        model_dir = moved or model_dir
        path = Path(model_dir)
        if path.is_dir() and not (path / "config.json").is_file():
            found = [p for p in (path / "last-checkpoint", *(d / "last-checkpoint" for d in path.glob("v*")))
                     if p.exists()]
            if not found:
                raise ConfigError(f"{name}: no config.json and no last-checkpoint under MODEL_DIR '{model_dir}'{note}")
            return str(max(found, key=_version_key).resolve())
        if not path.exists() and model_dir.startswith(("/", ".")):
            raise ConfigError(f"{name}: MODEL_DIR '{model_dir}' not found (give a checkpoint, a train.sh OUTPUT_DIR "
                              "or a hub id)")
        return model_dir

    def files(self) -> list[str]:
        """EVAL_FILES split on spaces, shell patterns expanded (a pattern that matches nothing stays as it is)."""
        return [hit for word in self.eval_files.split()
                for hit in ((sorted(glob.glob(word)) or [word]) if glob.has_magic(word) else [word])]

    def resolved(self) -> EvalLossConfig:
        """The checkpoint found, and the defaults that depend on it and on the GPUs, filled in."""
        checkpoint = self.checkpoint()
        output_dir = self.output_dir or (f"{checkpoint}/eval_loss" if Path(checkpoint).is_dir()
                                         else str(Path(self.root or ".") / RUNS_DIR / "eval_loss"))
        return dataclasses.replace(self, **self.device_defaults(), model_dir=checkpoint, output_dir=output_dir,
                                   eval_files=" ".join(self.files()))

    def file_output_dir(self, path: str) -> str:
        """Where swift writes the eval of one file: ``<output_dir>/<file stem>`` (of the resolved config)."""
        return f"{self.output_dir}/{_stem(path)}"

    def argvs(self, extra: list[str] = ()) -> list[list[str]]:
        """The ``swift sft`` command lines of the eval, one per file (of the resolved config), each with ``extra``."""
        c = self.resolved()
        b = swift_bool
        lines = []
        for path in c.files():
            # `--dataset FILE#1`: swift insists on a training set; one row of it is encoded and never trained on.
            argv = [c.swift, "sft", "--model", c.model_dir, "--use_hf", b(c.use_hf), "--check_model", b(c.check_model),
                    "--tuner_type", "full", "--dataset", f"{path}#1", "--val_dataset", path, "--num_train_epochs", "0",
                    "--eval_on_start", "true", "--save_strategy", "no", "--torch_dtype", c.torch_dtype,
                    "--attn_impl", c.attn_impl, "--packing", b(c.packing), "--max_length", str(c.max_len),
                    "--per_device_eval_batch_size", str(c.per_device_eval_batch_size),
                    "--dataset_num_proc", str(c.dataset_num_proc), "--packing_num_proc", str(c.dataset_num_proc),
                    "--dataloader_num_workers", str(c.dataloader_num_workers), "--output_dir", c.file_output_dir(path),
                    "--add_version", "false", "--report_to", "none"]
            if c.model_type:
                argv += ["--model_type", c.model_type]
            if c.template:
                argv += ["--template", c.template]
            if c.deepspeed != "none":
                argv += ["--deepspeed", c.deepspeed]
            lines.append([*argv, *extra])
        return lines


def first_eval_metrics(log: Path) -> tuple[str, str] | None:
    """(eval_loss, eval_token_acc) as written in the first row of swift's ``logging.jsonl`` that has an eval_loss
    (the accuracy empty when absent); None when no row has one."""
    if not log.is_file():
        return None
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue       # not a row of metrics (swift writes one JSON object a line): as the shell's sed did
        if isinstance(row, dict) and "eval_loss" in row:
            acc = row.get("eval_token_acc")
            return json.dumps(row["eval_loss"]), "" if acc is None else json.dumps(acc)
    return None


def run(config: EvalLossConfig, extra: list[str] = ()) -> int:
    """Evaluate every file (announcing the CPU fallback), write the summary; 0, swift's exit status when a call
    fails, or 1 when swift reported no eval_loss."""
    name = config.label
    moved = config.paper_run_dir()
    if moved:
        print(f"{name}: notice: {config.model_dir} is not here; using train.sh's {moved}", file=sys.stderr)
    c = config.resolved()
    if c.num_gpus == 0:
        warn_no_gpu(name, f"CPU eval in {c.torch_dtype} with {c.attn_impl} attention")
    out = Path(c.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / CONFIG_RECORD, dataclasses.asdict(c))
    summary = f"{c.output_dir}/{SUMMARY}"         # as given (./runs/), like the swift lines' paths
    Path(summary).write_text("\t".join(SUMMARY_HEADER) + "\n", encoding="utf-8")
    env = c.environ()
    for path, argv in zip(c.files(), c.argvs(list(extra))):
        log = Path(c.file_output_dir(path)) / "logging.jsonl"
        log.unlink(missing_ok=True)        # swift appends; keep only this run's metrics
        print(f"{name}: {c.model_dir} on {path} -> {c.file_output_dir(path)}", flush=True)
        code = subprocess.run(argv, env=env, check=False).returncode
        if code:
            return code
        metrics = first_eval_metrics(log)
        if metrics is None:
            print(f"{name}: swift reported no eval_loss in {log}", file=sys.stderr)
            return 1
        with open(summary, "a", encoding="utf-8") as f:
            f.write("\t".join((path, *metrics)) + "\n")
        print(f"{name}: eval_loss={metrics[0]} eval_token_acc={metrics[1]} ({path})", flush=True)
    print(f"{name}: summary in {summary}")
    return 0


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.training.swift_eval") -> int:
    """``python -m textwm.training.swift_eval [flags] [--print-command] [-- swift arguments]``."""
    return launcher_main(EvalLossConfig, run, argv, prog, usage="", recipes=False)


if __name__ == "__main__":
    raise SystemExit(main())
