"""What every ms-swift launcher shares: the GPU count and layout, the ``swift`` executable, the knobs' base config
and the launcher's ``main``.

The launchers are :mod:`textwm.training.swift_sft` and :mod:`textwm.training.swift_eval` (Stage 1: the AR world
model's SFT and loss-only eval, ``llm_training/{train,eval}.sh``) and :mod:`textwm.rl.sft_launch` and
:mod:`textwm.rl.launch` (Stage 2: the agent's SFT and GRPO). Each is one config dataclass whose fields are
:func:`knob` s (a default, a help text, the environment variable the shell launchers have always read) and one
``argv()``, the swift command line; ``--print-command`` prints it without running it.

GPU layout (:func:`apply_gpu_layout`): ``NUM_GPUS`` > 1 makes swift re-launch itself under torchrun
(``NPROC_PER_NODE``, ``MASTER_PORT``); ``NUM_GPUS=0`` hides the GPUs (a CPU run, tiny models only).

This module imports only :mod:`textwm.config`, so both stages build on it without importing each other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, ConfigError, option

#: Most of the CPUs that a launcher gives to data preprocessing by default.
MAX_DATASET_PROCS = 16


def knob(default, help: str, env: str, **kwargs):
    """A field whose default can come from the environment variable the shell launchers have always read."""
    return option(default, help, env=env, **kwargs)


def visible_gpus(unset: int | None = None) -> int:
    """GPUs in ``CUDA_VISIBLE_DEVICES`` when it is set, else ``unset`` when given (a recipe's GPU count, as the
    paper's scripts default it), else those ``nvidia-smi -L`` lists (0 without)."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return len([d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    if unset is not None:
        return unset
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return sum(line.startswith("GPU") for line in listed.splitlines())


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, as ``nproc`` counts them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def apply_gpu_layout(env: dict[str, str], num_gpus: int, master_port: int) -> None:
    """Set the GPU layout of a swift process in ``env``: with more than one GPU swift re-launches itself under
    torchrun (``NPROC_PER_NODE``, ``MASTER_PORT``); with none the GPUs are hidden; else, when
    ``CUDA_VISIBLE_DEVICES`` is not set, the first ``num_gpus``."""
    env.pop("NPROC_PER_NODE", None)
    if num_gpus > 1:
        env.update(NPROC_PER_NODE=str(num_gpus), MASTER_PORT=str(master_port))
    if num_gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif "CUDA_VISIBLE_DEVICES" not in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(num_gpus))


def warn_no_gpu(launcher: str, what: str) -> None:
    """The CPU fallback, announced on stderr: ``<launcher>: warning: no GPU (NUM_GPUS=0): <what>; ...``."""
    print(f"{launcher}: warning: no GPU (NUM_GPUS=0): {what}; only tiny models are practical", file=sys.stderr)


def default_swift() -> str:
    """The ``swift`` beside this Python (its venv's), else the one on the PATH."""
    beside = Path(sys.executable).with_name("swift")
    return str(beside) if beside.exists() else "swift"


def swift_bool(value: bool) -> str:
    """A flag value as swift's command line spells it."""
    return "true" if value else "false"


def swift_number(value: float) -> str:
    """A float on a swift command line, exact and as people write them: its shortest digits, and below 1 the shorter
    of the decimal and the scientific form, ties decimal (``2``, ``0.03``, ``2e-5``, ``1e-4``)."""
    exact = Decimal(repr(float(value))).normalize()
    decimal, scientific = f"{exact:f}", f"{exact:e}"
    return scientific if 0 < abs(value) < 1 and len(scientific) < len(decimal) else decimal


@dataclass
class SwiftRunConfig:
    """What any swift run is configured by whatever the model and the stage: the model's swift names, where the run
    writes, the GPUs, the data workers, the executable. Each field's default can come from the environment variable
    the shell launchers have always read."""

    model_type: str = knob("", "ms-swift model type (empty: inferred)", "MODEL_TYPE")
    template: str = knob("", "ms-swift chat template (empty: the model's)", "TEMPLATE")
    use_hf: bool = knob(True, "load models from the Hugging Face hub (false: ModelScope)", "USE_HF")
    root: str = knob("", "the folder the default paths are under (data, OUTPUT_DIR; default: the current one)",
                      "TEXTWM_ROOT")
    output_dir: str = knob("", "outputs (default: under <root>/runs/)", "OUTPUT_DIR")
    num_gpus: int | None = knob(None, "GPUs (default: those in CUDA_VISIBLE_DEVICES, else --gpus-unset, else those "
                                       "nvidia-smi lists); 0: CPU, tiny models only", "NUM_GPUS")
    gpus_unset: int | None = knob(None, "GPUs when neither NUM_GPUS nor CUDA_VISIBLE_DEVICES is set (a recipe's: "
                                         "the paper's scripts' default)", "GPUS_UNSET")
    master_port: int = knob(29500, "torchrun port (NUM_GPUS > 1)", "MASTER_PORT")
    check_model: bool = knob(False, "let ms-swift check the model files", "CHECK_MODEL")
    dataset_num_proc: int = knob(4, "dataset preprocessing processes", "DATASET_NUM_PROC")
    dataloader_num_workers: int = knob(4, "data loader workers", "DATALOADER_NUM_WORKERS")
    swift: str = knob("", "the swift executable (default: the one beside this Python)", "SWIFT")
    launcher: str = knob("", "name of the script that called this one, for messages", "LAUNCHER")

    @property
    def gpus(self) -> int:
        return visible_gpus(self.gpus_unset) if self.num_gpus is None else self.num_gpus


def launcher_main(cls: type, run: Callable[[Any, list[str]], int], argv: list[str] | None, prog: str, *,
                  usage: str = " --env NAME", recipes: bool = True) -> int:
    """``prog [flags] [-- swift arguments]`` for a launcher's config class ``cls``: the config from its ``--recipe``
    (when ``recipes``), the environment and the flags; then ``--print-command`` prints the swift line (one line per
    swift call), else ``run(config, extra)`` runs it. ``usage``: what the usage line shows after ``prog``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    cli = ConfigCLI(cls, prog=f"{prog}{usage}", description=cls.__doc__, key_values=False, recipes=recipes)
    cli.add_argument("--print-command", action="store_true", help="print the swift command line, do not run it")
    parsed = cli.parse_or_report(argv)
    if parsed is None:
        return 2
    config, extras = parsed
    try:
        if extras.print_command:
            lines = config.argvs(extra) if hasattr(config, "argvs") else [config.argv(extra)]
            print("\n".join(" ".join(line) for line in lines))
            return 0
        return run(config, extra)
    except ConfigError as exc:      # a default resolved against the GPUs, the files found, ... does not hold
        print(f"error: {exc}", file=sys.stderr)
        return 2
