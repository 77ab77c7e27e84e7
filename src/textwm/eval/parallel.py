"""``eval_parallel.py``: any agent on the real env, many episodes in parallel, one line per row.

    python alfworld/eval_parallel.py --agent expert --rows ROWS.jsonl --output-dir D --parallel 8
    python alfworld/eval_parallel.py --agent http://127.0.0.1:8000/v1 --rows ROWS.jsonl --output-dir D
    python alfworld/eval_parallel.py CKPT ROWS.jsonl OUT.jsonl GPU --max-turns 50 --parallel 32   # the paper's form

``--agent`` is ``expert`` (the env's own expert), an OpenAI-compatible URL, or a local checkpoint folder.
Writes ``D/episodes.jsonl`` (per row: ``index``, ``task_id``, ``task_type``, ``success``, ``steps``,
``reason``, ``init_admissible`` as the real game gave it at reset, ``actions``) and ``D/summary.json``
(``episodes``, ``success_rate``, ``per_task_type``, end reasons), beside everything ``python -m textwm.eval
agent-real`` writes. In the paper's form ``OUT.jsonl`` gets the paper's rows (``--episodes-file``;
fields: ``--paper-form``, mapped in :mod:`textwm.eval.paper_outputs`) and
``OUT_eval/`` beside it is the output dir (the mapping: :mod:`textwm.eval.paper_forms`, shared with eval_fast.py,
eval_openai.py and eval_sciworld.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.eval import run as eval_run
from textwm.eval.paper_forms import agent_flags, device_of, episodes_dir
from textwm.eval.paper_outputs import alfworld_report, alfworld_rows


@dataclass
class EvalParallelConfig:
    """Any agent on the real env, many episodes in parallel, one line per row."""

    positional: list[str] = option(help="the paper's form: CKPT ROWS OUT.jsonl GPU", positional=True,
                                   default_factory=list)
    agent: str = option("", "expert | OpenAI-compatible URL | local checkpoint folder")
    agent_model: str = option("", "model id at an agent URL (default: the first listed)")
    rows: str = option("", "RL task rows (JSONL)")
    output_dir: str = option("", "where episodes.jsonl and summary.json go")
    episodes_file: str = option("", "also write the per-row episodes here (the paper's OUT.jsonl; default "
                                    "--output-dir: OUT_eval/ beside it)")
    paper_form: str = option("parallel", "fields of the paper's OUT.jsonl rows: those of its eval_parallel.py, "
                                         "eval_fast.py or eval_openai.py (textwm.eval.paper_outputs)",
                             choices=("parallel", "fast", "openai"))
    parallel: int = option(8, "episodes in flight (one real env process each)")
    max_turns: int = option(50, "agent turns per episode")
    limit: int = option(-1, "the first N rows only (-1: all)")
    temperature: float = option(0.0, "agent sampling temperature")


def parse(argv: list[str], prog: str = "eval_parallel.py") -> EvalParallelConfig:
    """``argv`` as an :class:`EvalParallelConfig` (a bad value: ConfigError; bad syntax: SystemExit 2)."""
    return ConfigCLI(EvalParallelConfig, prog=prog, description=EvalParallelConfig.__doc__,
                     key_values=False).parse(argv)[0]


def eval_argv(args: EvalParallelConfig, env: str) -> tuple[list[str], Path | None]:
    """The ``python -m textwm.eval`` arguments of an ``eval_parallel`` command, and the paper form's OUT.jsonl."""
    out_file = Path(args.episodes_file) if args.episodes_file else None
    agent, rows, device = args.agent, args.rows, None
    output_dir = args.output_dir or (str(episodes_dir(out_file)) if out_file else "")
    if args.positional:
        if len(args.positional) != 4:
            raise SystemExit(f"error: the positional form is CKPT ROWS OUT.jsonl GPU, got {len(args.positional)} "
                             "arguments")
        agent, rows, out, gpu = args.positional
        out_file = Path(out)
        output_dir = str(episodes_dir(out_file))
        device = device_of(gpu)
    if not agent:
        raise SystemExit("error: --agent is required (expert, an OpenAI-compatible URL, or a checkpoint folder)")
    argv = ["--env", env, "agent-real", "--rows", rows, "--output-dir", output_dir, "--workers", str(args.parallel),
            "--max-turns", str(args.max_turns), "--temperature", str(args.temperature)]
    if args.limit > 0:
        argv += ["--episodes", str(args.limit)]
    argv += agent_flags(agent, agent_model=args.agent_model, device=device, batch_size=args.parallel)
    return argv, out_file


def per_row(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"index": i, "task_id": r["task_id"], "task_type": r["task"], "success": r["success"], "steps": r["turns"],
             "reason": r["reason"], "init_admissible": r.get("init_admissible"), "actions": r["actions"],
             "error": r.get("error")} for i, r in enumerate(records)]


def summary_of(real: dict[str, Any]) -> dict[str, Any]:
    return {"episodes": real["episodes"], "successes": real["successes"], "success_rate": real["success_rate"],
            "per_task_type": real["per_task"], "mean_turns": real["mean_turns"], "reasons": real["reasons"],
            "failures": {k: real[k] for k in ("agent_errors", "env_errors", "wm_errors")},
            "seconds": real.get("seconds")}


def main(argv: list[str] | None = None, *, env: str, prog: str | None = None) -> int:
    parsed = ConfigCLI(EvalParallelConfig, prog=prog or f"{env}/eval_parallel.py",
                       description=EvalParallelConfig.__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    flags, out_file = eval_argv(parsed[0], env)
    code = eval_run.main(flags, prog=prog)
    if code != 0:
        return code
    out = Path(flags[flags.index("--output-dir") + 1])
    records = read_jsonl(out / "episodes_real.jsonl").rows
    rows = per_row(records)
    write_jsonl(out / "episodes.jsonl", rows)
    summary = summary_of(json.loads((out / "summary_real.json").read_text()))
    write_json(out / "summary.json", summary)
    if out_file is not None:  # the paper's rows and closing lines (ours stay in episodes.jsonl)
        paper = alfworld_rows(records, read_jsonl(flags[flags.index("--rows") + 1]).rows, parsed[0].paper_form)
        write_jsonl(out_file, paper)
        print(f"{alfworld_report(paper)}\nresults -> {out_file}")
    print(f"{summary['successes']}/{summary['episodes']} = {summary['success_rate']:.3f} -> {out}/summary.json")
    return 0
