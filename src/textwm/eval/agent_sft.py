"""Agent SFT demos from a chat agent played in the real env: the paper's ``create_sft_gpt_agent.py``, any env.

    # a hosted model (the paper's: GPT through the OpenAI API; $OPENAI_API_KEY, $OPENAI_BASE_URL)
    python -m textwm.eval.agent_sft --env sciworld --rows rl_train.jsonl --agent-model gpt-5.5 \\
        --out sft_demos.jsonl --all-out sft_all.jsonl --workers 8
    # any OpenAI-compatible endpoint (vLLM, lmdeploy, our server)
    python -m textwm.eval.agent_sft --env alfworld --rows rl_train.jsonl --agent-url http://127.0.0.1:8000/v1 \\
        --out sft_demos.jsonl

Every row is played once in the real env (worker processes, as ``eval agent-real``). An episode is kept when it
succeeded (``--keep success``, the env's success score) or always (``--keep all``: the paper's AppWorld script
keeps every demo). A kept row is the row's own fields (``task_id``, ``instruction``, ``wm_system_prompt``, ...)
with ``messages`` the conversation as the agent had it: the row's system and first user message, each reply as
the agent wrote it (the env's parser read it; a reply it could not read is followed by the env's format hint),
each observation as the agent was told it, and the env's last observation; plus ``score``, ``success``,
``turns``, ``reason``. Such rows are the SFT data of ``scripts/lib/agent_sft.sh`` as they are.

Nothing fails quietly: an episode that ended on an agent or env failure is never kept, and is counted and shown
by reason; a run whose every episode failed exits 1. Files are written atomically, at the end.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.cli_checks import json_object
from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.jsonl import read_jsonl, write_jsonl
from textwm.envs.episode import FAILURE_REASONS
from textwm.envs.registry import env_names, get_env
from textwm.eval.agents import OpenAIAgent
from textwm.eval.closed_loop import evaluate_agent_real, load_rows
from textwm.eval.run import input_errors, setup_logging

log = logging.getLogger(__name__)

OPENAI_API_URL = "https://api.openai.com/v1"
#: Fields of a task row that the demo does not carry over (its own conversation replaces them).
_ROW_FIELDS_DROPPED = ("messages", "sim_task")


@dataclass
class AgentSFTConfig:
    """Play a chat agent in the real env and keep its episodes as agent SFT rows."""

    env: str = option("", "the env (a registered name, e.g. sciworld)")
    rows: str = option("", "RL task rows (the paper's *_rl_split.jsonl, or rl_train.jsonl of <env>/build_wm_dataset.py)")
    out: str = option("", "the kept demos (JSONL)")
    all_out: str = option("", "every episode, kept or not, with its score and end reason (JSONL; empty: not written)")
    keep: str = option("success", "which episodes become demos", choices=("success", "all"))
    tasks: list[str] = option(help="only rows of these task families", default_factory=list)
    episodes: int = option(0, "play the first N rows only (0: all)")
    max_turns: int = option(0, "agent turns per episode (0: each row's max_turns)")
    workers: int = option(8, "real-env worker processes = episodes in flight")
    agent_url: str = option(OPENAI_API_URL, "the agent's OpenAI-compatible endpoint", env="OPENAI_BASE_URL")
    agent_model: str = option("", "model id at --agent-url (required for the OpenAI API; else default: the first "
                                  "one /v1/models lists)")
    agent_api_key: str = option("", "bearer token for --agent-url", env="OPENAI_API_KEY", secret=True)
    temperature: float = option(0.0, "agent sampling temperature")
    agent_max_tokens: int = option(256, "agent tokens per reply at most")
    token_limit_field: str = option("max_tokens", "request field of that limit (OpenAI's reasoning models: "
                                                  "max_completion_tokens)",
                                    choices=("max_tokens", "max_completion_tokens"))
    agent_extra_body: str = option("", "JSON object merged into each request, e.g. '{\"reasoning_effort\": \"none\"}'")
    agent_concurrency: int = option(32, "requests in flight at most")
    agent_timeout: float = option(120.0, "seconds per request")

    def __post_init__(self) -> None:
        if self.env not in env_names():
            raise ConfigError(f"must name a registered env ({', '.join(env_names())}), got {self.env!r}", key="--env")
        if not self.rows:
            raise ConfigError("is required: the task rows to play", key="--rows")
        if not Path(self.rows).is_file():
            raise ConfigError(f"{self.rows}: file not found (the task rows to play)", key="--rows")
        if not self.out:
            raise ConfigError("is required: where the demos go", key="--out")
        for name in ("workers", "agent_max_tokens", "agent_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", key="--" + name.replace("_", "-"))
        for name in ("episodes", "max_turns", "temperature"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", key="--" + name.replace("_", "-"))
        if self.agent_url.rstrip("/") == OPENAI_API_URL:
            if not self.agent_api_key:
                raise ConfigError(f"the agent is the OpenAI API ({OPENAI_API_URL}), which needs a key: set "
                                  "$OPENAI_API_KEY (or --agent-api-key), or give another endpoint with --agent-url / "
                                  "$OPENAI_BASE_URL", key="--agent-api-key")
            if not self.agent_model:
                raise ConfigError("is required with the OpenAI API (e.g. gpt-5.5)", key="--agent-model")
        self.extra_body()

    def extra_body(self) -> dict[str, Any]:
        return json_object(self.agent_extra_body, "--agent-extra-body")


def _row_fields(spec: Any, path: str) -> dict[str, dict[str, Any]]:
    """Each task id's row fields beside its conversation (the first row of that id)."""

    fields: dict[str, dict[str, Any]] = {}
    for row in read_jsonl(path).rows:
        fields.setdefault(spec.task_id_of(row), {k: v for k, v in row.items() if k not in _ROW_FIELDS_DROPPED})
    return fields


def demo_row(record: Any, row_fields: dict[str, Any]) -> dict[str, Any]:
    """One episode (an :class:`~textwm.eval.episodes.EpisodeRecord` played with ``keep_messages``) as an SFT row."""
    return {**row_fields, "task_id": record.task_id, "messages": record.extra["messages"], "score": record.score,
            "success": record.success, "turns": record.turns, "reason": record.reason,
            "unparseable": record.unparseable, **({"error": record.error} if record.error else {})}


def run(config: AgentSFTConfig) -> dict[str, Any]:
    """Play every row, write the demos; returns the counts that :func:`main` prints."""

    spec = get_env(config.env)
    starts = load_rows(spec, config.rows, tasks=config.tasks, limit=config.episodes)
    fields = _row_fields(spec, config.rows)
    agent = OpenAIAgent(config.agent_url, model=config.agent_model or None, api_key=config.agent_api_key or None,
                        temperature=config.temperature, max_tokens=config.agent_max_tokens,
                        concurrency=config.agent_concurrency, timeout_s=config.agent_timeout,
                        extra_body=config.extra_body(), token_limit_field=config.token_limit_field)
    try:
        agent.check()
        result = evaluate_agent_real(spec, starts, agent, workers=config.workers, max_turns=config.max_turns,
                                     keep_messages=True)
    finally:
        agent.close()
    records = result.records
    failed = [r for r in records if r.reason in FAILURE_REASONS]
    rows = [demo_row(r, fields.get(r.task_id, {})) for r in records]
    kept = [row for row, r in zip(rows, records)
            if r.reason not in FAILURE_REASONS and (config.keep == "all" or r.success)]
    write_jsonl(config.out, kept)
    if config.all_out:
        write_jsonl(config.all_out, rows)
    scores = [r.score for r in records]
    return {"agent": agent.describe(), "episodes": len(records), "kept": len(kept),
            "successes": sum(r.success for r in records), "failed": len(failed),
            "failed_by_reason": dict(Counter(r.reason for r in failed)),
            "first_failure": failed[0].error if failed else None,
            "mean_score": sum(scores) / len(scores) if scores else None,
            "ends": dict(Counter(r.reason for r in records)), "seconds": result.summary.get("seconds")}


def summary_text(summary: dict[str, Any], config: AgentSFTConfig) -> str:
    n = summary["episodes"]
    lines = [f"agent {summary['agent'].get('model')} at {summary['agent'].get('api_url')}: {n} episodes in "
             f"{summary['seconds']} s",
             f"  successes: {summary['successes']}/{n}; mean score {summary['mean_score']:.3g}" if n else "  no rows",
             f"  episode ends: {', '.join(f'{k} {v}' for k, v in sorted(summary['ends'].items()))}"]
    if summary["failed"]:
        lines.append(f"  FAILED (not kept): {summary['failed']} "
                     f"({', '.join(f'{k} {v}' for k, v in summary['failed_by_reason'].items())}); first: "
                     f"{summary['first_failure']}")
    lines.append(f"wrote {config.out}: {summary['kept']} demos (--keep {config.keep})"
                 + (f"; {config.all_out}: all {n}" if config.all_out else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``python -m textwm.eval.agent_sft ...``; exit 2 on bad input, 1 when every episode failed."""

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = ConfigCLI(AgentSFTConfig, prog=prog or "python -m textwm.eval.agent_sft",
                           description=AgentSFTConfig.__doc__, key_values=False).parse(argv)[0]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging()
    try:
        summary = run(config)
    except input_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary_text(summary, config))
    if summary["episodes"] and summary["failed"] == summary["episodes"]:
        print("error: every episode failed; no demo was made", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True)
class PaperScript:
    """What one of the paper's ``create_sft_gpt_agent.py`` scripts fixes: its env, files and agent settings."""

    env: str
    #: Its input and output files, relative to the script's folder.
    rows: str
    out: str
    all_out: str = ""
    keep: str = "success"
    max_turns: int = 50
    workers: int = 8
    #: Its agent's settings, used when the agent is the OpenAI API (no --agent-url, no $OPENAI_BASE_URL).
    openai_flags: tuple[str, ...] = ()
    #: How to make ``rows`` when it is not there.
    rows_hint: str = ""

    def main(self, folder: Path, argv: list[str] | None = None, prog: str | None = None) -> int:
        """The paper's command (no flag needed); any of our flags may follow and win."""
        argv = list(sys.argv[1:] if argv is None else argv)
        rows = folder / self.rows
        asks_help = "-h" in argv or "--help" in argv
        if "--rows" not in argv and not asks_help and not rows.is_file():
            print(f"error: {rows} not found: {self.rows_hint}, or give --rows", file=sys.stderr)
            return 2
        hosted = "--agent-url" not in argv and not os.environ.get("OPENAI_BASE_URL")
        base = ["--env", self.env, "--rows", str(rows), "--out", str(folder / self.out), "--keep", self.keep,
                "--max-turns", str(self.max_turns), "--workers", str(self.workers)]
        if self.all_out:
            base += ["--all-out", str(folder / self.all_out)]
        return main([*base, *(self.openai_flags if hosted else ()), *argv], prog)


if __name__ == "__main__":
    raise SystemExit(main())
