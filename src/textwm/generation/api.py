"""Generate world-model predictions for chat datasets through an OpenAI-compatible endpoint.

Input: chat rows whose last message is the target (``<data_dir>/<name>.jsonl``). Output: rows in
the format of the paper's ``eval_generate.py`` — ``{index, config, prediction_raw, reference,
generated, ground_truth}`` — that :mod:`textwm.metrics.scorer` reads. Failed requests become
``ERROR: ...`` predictions, counted in the report and by the scorer.
"""

from __future__ import annotations

import asyncio
import logging
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
