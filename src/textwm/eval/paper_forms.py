"""The paper's evaluation command lines, mapped onto ours once (patronus-ai/mdlm_world_modeling).

* ``alfworld/eval_parallel.py CKPT ROWS OUT.jsonl GPU`` (its positional form: :func:`textwm.eval.parallel.eval_argv`,
  with :func:`agent_flags`, :func:`device_of`, :func:`episodes_dir` from here);
* ``alfworld/eval_fast.py CKPT... --dataset ROWS --gpus 0 --max-turns 35 [--parallel N] [--out-dir DIR]``
  (:func:`eval_fast_argvs`: one eval_parallel positional form per checkpoint, OUT = ``DIR/eval_<basename>.jsonl``);
* ``alfworld/eval_openai.py MODEL ROWS OUT [--max-turns] [--limit] [--concurrency]`` (:func:`eval_openai_argv`:
  an OpenAI-compatible endpoint agent, ``$OPENAI_BASE_URL`` or api.openai.com, key ``$OPENAI_API_KEY``);
* ``sciworld/eval_sciworld.py CKPT ROWS LABEL GPU`` (:func:`sciworld_argv`: ``agent-real`` into
  ``data/eval_<LABEL>/``).

Each also writes the paper's output file(s) with its fields (OUT.jsonl, ``DIR/eval_<basename>.jsonl``,
``data/eval_<LABEL>.json``), mapped from our episode records by :mod:`textwm.eval.paper_outputs`.

Every mapping returns an argv of ours (a list of str); a paper flag we cannot honour raises ValueError naming it and
what to use instead. In each form a GPU index N means ``--device cuda:N`` (the paper set CUDA_VISIBLE_DEVICES=N).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_json
from textwm.eval.paper_outputs import sciworld_json, sciworld_report
from textwm.eval.run import MODES

#: Where the paper's eval_openai.py went (the ``openai`` client's default base URL, or $OPENAI_BASE_URL).
OPENAI_URL = "https://api.openai.com/v1"


def device_of(gpu: str) -> str:
    """The paper's GPU argument as a torch device: ``"3"`` -> ``"cuda:3"``; ``cpu``/``cuda:1`` as they are."""
    return f"cuda:{gpu}" if gpu.isdigit() else gpu


def episodes_dir(out_file: Path) -> Path:
    """Where everything of ours goes when the paper names one OUT.jsonl: ``OUT_eval/`` beside it."""
    return out_file.parent / f"{out_file.stem}_eval"


def agent_flags(agent: str, *, agent_model: str = "", device: str | None = None, batch_size: int = 8) -> list[str]:
    """``python -m textwm.eval`` agent flags of an ``--agent`` value: ``expert``, an OpenAI-compatible URL, or a
    local checkpoint folder (decoded ``batch_size`` conversations at a time on ``device``)."""
    if agent == "expert":
        return ["--agent", "expert"]
    if agent.startswith(("http://", "https://")):
        return ["--agent-url", agent] + (["--agent-model", agent_model] if agent_model else [])
    return ["--agent-path", agent, "--agent-batch-size", str(batch_size)] + (["--device", device] if device else [])


@dataclass
class EvalFastConfig:
    """The paper's eval_fast.py: each checkpoint on real ALFWorld games, greedy, one GPU (alfworld/eval_parallel.py's
    positional form per checkpoint). Its main()'s flags and defaults (``--gpus``: 0, not "0,3")."""

    checkpoints: list[str] = option(help="checkpoint folders, evaluated one after another", positional=True)
    dataset: str = option(help="RL task rows (JSONL)")
    gpus: str = option("0", "one GPU index (the paper's tensor-parallel list: see the error)")
    max_turns: int = option(35, "agent turns per episode")
    parallel: int = option(32, "episodes in flight")
    out_dir: str = option("data", "writes eval_<checkpoint basename>.jsonl (+ its _eval/ folder)")


@dataclass
class EvalOpenAIConfig:
    """The paper's eval_openai.py: an OpenAI(-compatible) chat model on real ALFWorld games (base URL
    $OPENAI_BASE_URL or the OpenAI API's, key $OPENAI_API_KEY; Chat Completions). Its main()'s flags and defaults."""

    model: str = option(help="model id, e.g. gpt-4o", positional=True)
    dataset: str = option(help="RL task rows (JSONL)", positional=True)
    out: str = option(help="per-row episodes (JSONL); everything else goes to OUT_eval/ beside it", positional=True)
    max_turns: int = option(30, "agent turns per episode")
    limit: int = option(-1, "the first N rows only (-1: all)")
    concurrency: int = option(4, "episodes (and requests) in flight")


def _parse(cls: type, argv: list[str], prog: str):
    """``argv`` of a paper form as its config (abbreviated flags refused: they are the paper's exact spellings)."""
    return ConfigCLI(cls, prog=prog, description=cls.__doc__, key_values=False, allow_abbrev=False).parse(argv)[0]


def eval_fast_argvs(argv: list[str], prog: str = "alfworld/eval_fast.py") -> list[list[str]]:
    """One ``eval_parallel.py CKPT ROWS OUT.jsonl GPU --max-turns T --parallel P`` argv per checkpoint, OUT =
    ``<out-dir>/eval_<basename>.jsonl`` as the paper's eval_fast.py main() named it."""
    args = _parse(EvalFastConfig, argv, prog)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if len(gpus) != 1:
        raise ValueError(f"--gpus {args.gpus!r}: the paper ran vLLM tensor-parallel over these GPUs; our local "
                         "checkpoint agent runs on one device: give one GPU (--gpus 0), or serve the checkpoint "
                         "(vllm serve CKPT --tensor-parallel-size N) and run alfworld/eval_parallel.py --agent "
                         "http://HOST:PORT/v1 --rows ROWS --output-dir DIR")
    labels = [Path(c).name for c in args.checkpoints]
    repeated = sorted({name for name in labels if labels.count(name) > 1})
    if repeated:
        raise ValueError(f"checkpoints {repeated} share a basename, so their eval_<basename>.jsonl would overwrite "
                         "each other: run them one at a time with different --out-dir")
    return [[ckpt, args.dataset, str(Path(args.out_dir) / f"eval_{label}.jsonl"), gpus[0],
             "--max-turns", str(args.max_turns), "--parallel", str(args.parallel), "--paper-form", "fast"]
            for ckpt, label in zip(args.checkpoints, labels, strict=True)]


def eval_openai_argv(argv: list[str], prog: str = "alfworld/eval_openai.py") -> list[str]:
    """The ``eval_parallel.py --agent URL --agent-model MODEL ...`` argv of an eval_openai.py command."""
    args = _parse(EvalOpenAIConfig, argv, prog)
    url = os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
    flags = ["--agent", url, "--agent-model", args.model, "--rows", args.dataset, "--episodes-file", args.out,
             "--max-turns", str(args.max_turns), "--parallel", str(args.concurrency), "--paper-form", "openai"]
    return flags + (["--limit", str(args.limit)] if args.limit > 0 else [])


def is_sciworld_paper_form(argv: list[str]) -> bool:
    """The paper's ``eval_sciworld.py CKPT ...``: the first argument is neither a flag nor one of our modes."""
    return bool(argv) and not argv[0].startswith("-") and argv[0] not in MODES


def sciworld_argv(argv: list[str]) -> list[str]:
    """``CKPT ROWS LABEL GPU [our flags]`` (the paper's sciworld/eval_sciworld.py main(), which read sys.argv[1:5]
    and saved ``data/eval_<LABEL>.json``) -> ``agent-real --agent-path CKPT --rows ROWS --device cuda:GPU
    --output-dir data/eval_<LABEL> [our flags]``; our flags come last, so they override. Any other argv: as it is."""
    if not is_sciworld_paper_form(argv):
        return list(argv)
    n = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    if n != 4:
        raise ValueError(f"the paper's form is CKPT ROWS LABEL GPU (4 arguments before any flag), got {n}: "
                         f"{argv[:n]}; or use ours: agent-real --agent-path CKPT --rows ROWS --device cuda:0 "
                         "--output-dir DIR")
    ckpt, rows, label, gpu = argv[:4]
    return ["agent-real", "--agent-path", ckpt, "--rows", rows, "--device", device_of(gpu),
            "--output-dir", str(Path("data") / f"eval_{label}"), *argv[4:]]


def _last(argv: list[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` in ``argv`` (the last one wins, as on a command line), or None."""
    hits = [i for i, a in enumerate(argv) if a == flag and i + 1 < len(argv)]
    return argv[hits[-1] + 1] if hits else None


def write_sciworld_paper_json(paper_argv: list[str]) -> Path:
    """After a paper-form run (``CKPT ROWS LABEL GPU [flags]``): the paper's ``eval_<LABEL>.json`` beside our
    output dir (``data/eval_<LABEL>/`` -> ``data/eval_<LABEL>.json``), mapped from its ``episodes_real.jsonl``
    (:func:`textwm.eval.paper_outputs.sciworld_json`); prints the paper's closing lines. Returns the path."""

    flags = sciworld_argv(paper_argv)
    out_dir = Path(_last(flags, "--output-dir") or "")
    paper = sciworld_json(paper_argv[2], read_jsonl(out_dir / "episodes_real.jsonl").rows,
                          read_jsonl(_last(flags, "--rows") or "").rows)
    path = out_dir.parent / f"{out_dir.name}.json"
    write_json(path, paper)
    print(f"{sciworld_report(paper)}\n\n  Saved: {path}")
    return path
