"""Generate world-model predictions for chat datasets through an OpenAI-compatible endpoint.

Input: chat rows whose last message is the target (``<data_dir>/<name>.jsonl``). Output: rows in
the format of the paper's ``eval_generate.py`` — ``{index, config, prediction_raw, reference,
generated, ground_truth}`` — that :mod:`textwm.metrics.scorer` reads. Failed requests become
``ERROR: ...`` predictions, counted in the report and by the scorer.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.clients.openai import ChatClient, complete_all, resolve_model_id
from textwm.clients.retry import RetryPolicy
from textwm.data.jsonl import read_jsonl, write_jsonl
from textwm.data.schema import plain_messages, split_prompt_target, validate_target_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiGenerationConfig:
    api_url: str
    model: str | None = None
    api_key: str | None = None
    max_tokens: int = 2048
    temperature: float = 0.0
    concurrency: int = 32
    max_retries: int = 3
    timeout_s: float = 120.0


@dataclass(frozen=True)
class GenerationReport:
    name: str
    output: Path
    rows: int
    failed: int
    model: str


def generate_file(name: str, data_path: str | Path, output_path: str | Path, config: ApiGenerationConfig
                  ) -> GenerationReport:
    """Generate one prediction per row of ``data_path`` into ``output_path`` (atomic write)."""
    rows = read_jsonl(data_path, validate=validate_target_row).rows
    prompts, references = zip(*(split_prompt_target(r) for r in rows))
    texts, model = asyncio.run(_generate(list(prompts), config, desc=name))
    run_config: dict[str, Any] = {"api_url": config.api_url, "model": model, "max_tokens": config.max_tokens,
                                  "temperature": config.temperature}
    out_rows = [{"index": i, "config": run_config, "prediction_raw": text, "reference": ref,
                 "generated": text, "ground_truth": ref} for i, (text, ref) in enumerate(zip(texts, references))]
    write_jsonl(output_path, out_rows)
    failed = sum(t.startswith("ERROR") for t in texts)
    return GenerationReport(name=name, output=Path(output_path), rows=len(out_rows), failed=failed, model=model)


async def _generate(prompts: list[list[dict]], config: ApiGenerationConfig, *, desc: str) -> tuple[list[str], str]:
    model = config.model or await resolve_model_id(config.api_url, api_key=config.api_key)
    async with ChatClient(config.api_url, model=model, api_key=config.api_key, timeout_s=config.timeout_s,
                          retry=RetryPolicy(max_retries=config.max_retries),
                          max_connections=config.concurrency) as client:
        texts = await complete_all(client, [plain_messages(p) for p in prompts], concurrency=config.concurrency,
                                   desc=desc, max_tokens=config.max_tokens, temperature=config.temperature)
    return texts, model


class ApiPredictions:
    """The scorer's prediction source for ``--api-url``: generates ``<data-dir>/<name>.jsonl``'s predictions from an
    OpenAI-compatible endpoint into the scorer's input folder first (``llm_training/evaluate.py``;
    :func:`textwm.metrics.cli.main`'s ``predictions``)."""

    description = """With --api-url, first generates predictions for <data-dir>/<name>.jsonl (chat rows; the
last message is the reference) from an OpenAI-compatible /v1/chat/completions endpoint into
<output-dir>/<name>_outputs.jsonl, then scores them."""
    #: Flags that only shape the requests (--api-key left out: its default comes from the environment).
    flags = ("model", "data_dir", "max_tokens", "temperature", "concurrency", "max_retries", "timeout")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("generation through an OpenAI-compatible endpoint")
        g.add_argument("--api-url", help="e.g. http://localhost:8000/v1/chat/completions (or the server's base URL)")
        g.add_argument("--model", help="model id (default: the first one the server lists under /v1/models)")
        g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                       help="bearer token (default: $OPENAI_API_KEY)")
        g.add_argument("--data-dir", default="./data", help="folder with <name>.jsonl chat rows (default: %(default)s)")
        g.add_argument("--max-tokens", type=int, default=2048)
        g.add_argument("--temperature", type=float, default=0.0)
        g.add_argument("--concurrency", "--max-workers", dest="concurrency", type=int, default=32,
                       help="requests in flight at most (default: %(default)s)")
        g.add_argument("--max-retries", type=int, default=3, help="retries of a transient failure (default: %(default)s)")
        g.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: %(default)s)")

    def __call__(self, args: argparse.Namespace) -> None:
        config = ApiGenerationConfig(api_url=args.api_url, model=args.model, api_key=args.api_key,
                                     max_tokens=args.max_tokens, temperature=args.temperature,
                                     concurrency=args.concurrency, max_retries=args.max_retries,
                                     timeout_s=args.timeout)
        for name in args.datasets:
            out = Path(args.input_dir) / args.file_pattern.format(name=name)
            rep = generate_file(name, Path(args.data_dir) / f"{name}.jsonl", out, config)
            print(f"{name}: {rep.rows} predictions from {rep.model} -> {rep.output} ({rep.failed} failed requests)")
