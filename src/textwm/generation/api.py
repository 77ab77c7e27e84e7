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
from textwm.config import option
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


@dataclass
class ApiFlags:
    """The flags of generation through an OpenAI-compatible endpoint (the scorer's ``--api-url`` and its company)."""

    api_url: str = option("", "e.g. http://localhost:8000/v1/chat/completions (or the server's base URL)")
    model: str | None = option(None, "model id (default: the first one the server lists under /v1/models)")
    api_key: str | None = option(None, "bearer token", env="OPENAI_API_KEY", secret=True)
    data_dir: str = option("./data", "folder with <name>.jsonl chat rows")
    max_tokens: int = option(2048, "tokens per answer at most")
    temperature: float = option(0.0, "sampling temperature")
    concurrency: int = option(32, "requests in flight at most", aliases=("--max-workers",))
    max_retries: int = option(3, "retries of a transient failure")
    timeout: float = option(120.0, "seconds per request")


class ApiPredictions:
    """The scorer's prediction source for ``--api-url``: generates ``<data-dir>/<name>.jsonl``'s predictions from an
    OpenAI-compatible endpoint into the scorer's input folder first (``llm_training/evaluate.py``;
    :func:`textwm.metrics.cli.main`'s ``predictions``)."""

    description = """With --api-url, first generates predictions for <data-dir>/<name>.jsonl (chat rows; the
last message is the reference) from an OpenAI-compatible /v1/chat/completions endpoint into
<output-dir>/<name>_outputs.jsonl, then scores them."""
    config_class = ApiFlags
    trigger = "api_url"
    #: Flags that only shape the requests (--api-key left out: its default comes from the environment).
    flags = ("model", "data_dir", "max_tokens", "temperature", "concurrency", "max_retries", "timeout")

    def __call__(self, flags: ApiFlags, score: Any) -> None:
        """Write ``score.datasets``' prediction files into ``score.input_dir`` (``score``: the scorer's config)."""
        config = ApiGenerationConfig(api_url=flags.api_url, model=flags.model, api_key=flags.api_key,
                                     max_tokens=flags.max_tokens, temperature=flags.temperature,
                                     concurrency=flags.concurrency, max_retries=flags.max_retries,
                                     timeout_s=flags.timeout)
        for name in score.datasets:
            out = Path(score.input_dir) / score.file_pattern.format(name=name)
            rep = generate_file(name, Path(flags.data_dir) / f"{name}.jsonl", out, config)
            print(f"{name}: {rep.rows} predictions from {rep.model} -> {rep.output} ({rep.failed} failed requests)")
