"""Batched generation over evaluation datasets on many GPUs (``sdar/eval_generate.py``).

Each dataset's rows are dealt round-robin to ``num_gpus`` worker processes (one model copy per
GPU); a worker renders prompts with the checkpoint's chat template, sorts them by length and
decodes them in batches of ``per_batch`` with the checkpoint's decoder (SDAR or AR). A batch that
fails becomes ``ERROR: ...`` rows (counted and logged), never a silent gap. ``num_gpus = 0``, or a
machine without CUDA, runs in this process on the CPU.

Output per dataset: ``<output_dir>/<name>_outputs.jsonl`` with rows ``{index, config,
prediction_raw, reference, generated, ground_truth}`` (the paper's ``sdar/eval_generate.py`` format;
``config`` is the dataset name), plus ``skipped_overlong`` when ``max_model_len`` is set (the paper's
``wedlm/eval_generate.py`` format: its rows are ``{index, prediction_raw, reference, config,
skipped_overlong}``), and ``<output_dir>/eval_generate_config.json`` with every setting and the counts.

The paper's flag spellings are aliases of ours (:data:`PAPER_DECODE_ALIASES`, ``--batch-size``);
:class:`WeDLMEvalGenerateConfig` carries the defaults of the paper's ``wedlm/eval_generate.py``.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from textwm.cli_checks import check_output_dir
from textwm.config import ConfigError, config_dict, option
from textwm.data.chat_encoder import ChatEncoder
from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.data.schema import split_prompt_target, validate_target_row
from textwm.generation import DECODER_ENGINES
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model, read_spec
from textwm.models.families import get_family

log = logging.getLogger(__name__)

#: The paper's ``wedlm/eval_generate.py`` flags for our decoding settings (``DecodeSettings`` field -> flags):
#: ``--max-output-tokens`` is its ``SamplingParams.max_tokens`` (new tokens), the three WeDLM knobs its
#: ``LLM(wedlm_window_size=...)`` and ``SamplingParams(wedlm_entropy_threshold=..., wedlm_pos_penalty_factor=...)``.
PAPER_DECODE_ALIASES = {"gen_length": ("--max-output-tokens",), "window_size": ("--wedlm-window-size",),
                        "entropy_threshold": ("--wedlm-entropy-threshold",),
                        "position_penalty": ("--wedlm-pos-penalty-factor",)}

#: Tokens kept free between a prompt and ``max_model_len`` beyond the output budget: the paper's
#: ``wedlm/eval_generate.py`` ``main`` sets ``prompt_budget = max_model_len - max_output_tokens - 64``.
OVERLONG_MARGIN_TOKENS = 64


@dataclass
class EvalGenerateConfig:
    """Batched generation over evaluation datasets, one model copy per GPU (``sdar/eval_generate.py``)."""

    model_path: str = option(help="checkpoint folder: SDAR (block diffusion), WeDLM (streaming decoding) or any "
                                  "causal LM")
    data_dir: str = option(help="folder of the evaluation files")
    datasets: list[str] = option(help="dataset names", metavar="NAME")
    output_dir: str = option(help="writes <name>_outputs.jsonl here")
    file_pattern: str = option("eval_{name}.jsonl", "file name in --data-dir")
    num_gpus: int = option(1, "worker processes, one GPU each; 0 = in-process on the CPU")
    per_batch: int = option(8, "prompts per forward batch per GPU (--batch-size: the paper's WeDLM spelling)",
                            aliases=("--batch-size",))
    prompt_truncate: int | None = option(8000, "keep at most the last N prompt tokens; none = no cut")
    decode: DecodeSettings = option(help="decoding", default_factory=DecodeSettings,
                                    inner_aliases=PAPER_DECODE_ALIASES)
    max_model_len: int | None = option(None, "context length: a prompt of more than max_model_len - gen_length - "
                                             f"{OVERLONG_MARGIN_TOKENS} tokens is not generated, its row reads "
                                             f"{SKIPPED_OVERLONG} (rows get skipped_overlong); none = off")
    retry_singly: bool = option(False, "retry a failed batch one row at a time (only rows failing alone become "
                                       "ERROR rows); off: the whole batch becomes ERROR rows")
    dtype: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32")
    mask_token_id: int | None = option(None, "for SDAR/WeDLM checkpoints whose config.json lacks mask_token_id")
    engine: str = option("auto", "decoder implementation: static (the static-shape engine, CUDA graphs), reference "
                                 "(the batched reference decoders), auto (static on CUDA, reference on CPU)",
                         choices=DECODER_ENGINES)

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ConfigError("give at least one dataset name", key="--datasets")
        for name in ("per_batch", "prompt_truncate"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"must be >= 1, got {value}", key="--" + name.replace("_", "-"))
        budget = self.prompt_budget()
        if budget is not None and budget < 1:
            raise ConfigError(f"{self.max_model_len} leaves no room for a prompt: it must exceed --gen-length "
                              f"({self.decode.gen_length}) + {OVERLONG_MARGIN_TOKENS}", key="--max-model-len")

    def prompt_budget(self) -> int | None:
        """The most prompt tokens a row may have before it is skipped as overlong (None: no limit)."""
        if self.max_model_len is None:
            return None
        return self.max_model_len - self.decode.gen_length - OVERLONG_MARGIN_TOKENS


_DECODE_FIELDS = frozenset(f.name for f in fields(DecodeSettings))

#: The paper's ``wedlm/eval_generate.py`` command-line defaults, as our settings.
WEDLM_PAPER_DEFAULTS = {"max_model_len": 16384, "per_batch": 32, "gen_length": 8192, "window_size": 16,
                        "entropy_threshold": 0.6, "position_penalty": 0.02, "temperature": 0.0}


@dataclass
class WeDLMEvalGenerateConfig(EvalGenerateConfig):
    """``wedlm/eval_generate.py``: the same settings, with the paper's WeDLM script's defaults
    (:data:`WEDLM_PAPER_DEFAULTS`): prompts are never cut, an overlong one becomes a ``SKIPPED_OVERLONG`` row,
    and a failed batch is retried row by row, as that script does."""

    per_batch: int = option(WEDLM_PAPER_DEFAULTS["per_batch"], "prompts per forward batch per GPU (--batch-size: "
                            "the paper's spelling)", aliases=("--batch-size",))
    prompt_truncate: int | None = option(None, "keep at most the last N prompt tokens; none = no cut (the paper's "
                                               "WeDLM script cuts none: overlong prompts are skipped)")
    decode: DecodeSettings = option(help="decoding", inner_aliases=PAPER_DECODE_ALIASES, default_factory=partial(
        DecodeSettings, **{k: v for k, v in WEDLM_PAPER_DEFAULTS.items() if k in _DECODE_FIELDS}))
    max_model_len: int | None = option(WEDLM_PAPER_DEFAULTS["max_model_len"], "context length: a prompt of more "
                                       f"than max_model_len - gen_length - {OVERLONG_MARGIN_TOKENS} tokens is not "
                                       f"generated, its row reads {SKIPPED_OVERLONG}; none = off")
    retry_singly: bool = option(True, "retry a failed batch one row at a time (only rows failing alone become "
                                      "ERROR rows), as the paper's WeDLM script does")


@dataclass
class Job:
    dataset: str
    index: int
    prompt: list[dict]
    reference: str


@dataclass
class ShardResult:
    rows: list[dict] = field(default_factory=list)
    errors: int = 0
    truncated: int = 0
    skipped_overlong: int = 0
    tokens: int = 0
    #: The decoding loop alone (after the model load and prompt encoding): what a decoder's speed is.
    decode_seconds: float = 0.0


def _error_text(exc: BaseException) -> str:
    """The prediction of a row whose decoding failed (the paper's scripts: ``ERROR: <type>: <repr>``)."""
    return f"ERROR: {type(exc).__name__}: {exc!r}"


def _row(config: EvalGenerateConfig, job: Job, text: str, *, skipped: bool = False) -> dict:
    """One output row: the paper's ``sdar/eval_generate.py`` keys, plus ``skipped_overlong`` (its
    ``wedlm/eval_generate.py`` key) when ``max_model_len`` is set. ``_dataset`` is removed by :func:`run`."""
    row = {"index": job.index, "config": job.dataset, "prediction_raw": text, "reference": job.reference,
           "generated": text, "ground_truth": job.reference, "_dataset": job.dataset}
    if config.max_model_len is not None:
        row["skipped_overlong"] = skipped
    return row


def _encode_jobs(config: EvalGenerateConfig, jobs: list[Job], encoder: Any,
                 result: ShardResult) -> list[tuple[Job, list[int]]]:
    """Prompt ids of the jobs to decode, shortest first. A prompt over :meth:`EvalGenerateConfig.prompt_budget`
    (measured before any cut, as the paper's ``wedlm/eval_generate.py`` ``load_eval`` does) becomes a
    ``SKIPPED_OVERLONG`` row in ``result`` instead; a prompt over ``prompt_truncate`` keeps its last tokens."""
    budget = config.prompt_budget()
    encoded = []
    for job in jobs:
        ids = encoder.prompt_ids(job.prompt)
        if budget is not None and len(ids) > budget:
            result.rows.append(_row(config, job, SKIPPED_OVERLONG, skipped=True))
            result.skipped_overlong += 1
            continue
        if config.prompt_truncate is not None and len(ids) > config.prompt_truncate:
            ids = ids[-config.prompt_truncate:]   # keep the end: the action and the generation prompt
            result.truncated += 1
        encoded.append((job, ids))
    encoded.sort(key=lambda item: len(item[1]))
    return encoded


def _decode_batch(config: EvalGenerateConfig, decoder: Any, tokenizer: Any, prompts: list[list[int]],
                  result: ShardResult, device: str, label: str, *, retry: bool) -> list[str]:
    """The texts of one batch of prompt ids (``[B]`` lists of ids); a failure becomes ``ERROR: ...`` texts,
    counted in ``result.errors``. With ``retry`` (``retry_singly``) a failed batch is decoded again one row
    at a time, so only the rows that fail alone are errors (the paper's ``wedlm/eval_generate.py``
    ``run_dataset``; its ``sdar/eval_generate.py`` ``process_shard`` does not retry)."""
    # heavy: loads torch
    import torch

    try:
        outputs = decoder.generate(prompts, config.decode)
    except Exception as exc:  # noqa: BLE001 -- a failed batch becomes counted, logged ERROR rows
        log.error("[%s] batch of %d rows failed: %s", label, len(prompts), _error_text(exc))
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        if not retry:
            result.errors += len(prompts)
            return [_error_text(exc)] * len(prompts)
        log.info("[%s] retrying those %d rows one at a time (--retry-singly)", label, len(prompts))
        texts = []
        for ids in prompts:
            texts += _decode_batch(config, decoder, tokenizer, [ids], result, device, label, retry=False)
        return texts
    result.tokens += sum(len(o.token_ids) for o in outputs)
    return [tokenizer.decode(o.token_ids, skip_special_tokens=False) for o in outputs]


def run_shard(config: EvalGenerateConfig, jobs: list[Job], device: str, label: str = "cpu") -> ShardResult:
    """Decode ``jobs`` on ``device`` (one model copy); runs in a worker process or in-process."""
    return run_shard_passes([config], jobs, device, label)[0]


def run_shard_passes(configs: list[EvalGenerateConfig], jobs: list[Job], device: str,
                     label: str = "cpu") -> list[ShardResult]:
    """Decode ``jobs`` once per config on ``device`` with one model load (the configs differ in their decoding
    settings alone: :func:`run_passes`)."""
    # heavy: the decoders load torch; the API path needs none
    from textwm.generation.decoders import make_decoder

    first = configs[0]
    loaded = load_model(first.model_path, device=device, dtype=first.dtype, mask_token_id=first.mask_token_id)
    decoder = make_decoder(loaded.model, loaded.spec, pad_token_id=loaded.tokenizer.pad_token_id,
                           engine=first.engine)
    encoder = ChatEncoder(loaded.tokenizer)
    return [_decode_jobs(config, jobs, decoder, encoder, loaded.tokenizer, device,
                         label if len(configs) == 1 else f"{label}, pass {i + 1}/{len(configs)}")
            for i, config in enumerate(configs)]


def _decode_jobs(config: EvalGenerateConfig, jobs: list[Job], decoder: Any, encoder: Any, tokenizer: Any,
                 device: str, label: str) -> ShardResult:

    result = ShardResult()
    encoded = _encode_jobs(config, jobs, encoder, result)
    if result.skipped_overlong:
        log.warning("[%s] %d prompts longer than %d tokens (--max-model-len %d - --gen-length %d - %d) are not "
                    "generated: their rows read %s", label, result.skipped_overlong, config.prompt_budget(),
                    config.max_model_len, config.decode.gen_length, OVERLONG_MARGIN_TOKENS, SKIPPED_OVERLONG)
    batches = [encoded[i:i + config.per_batch] for i in range(0, len(encoded), config.per_batch)]
    decode_started = time.perf_counter()
    for batch in tqdm(batches, desc=f"generate [{label}]", unit="batch", mininterval=5.0):
        texts = _decode_batch(config, decoder, tokenizer, [ids for _, ids in batch], result, device, label,
                              retry=config.retry_singly)
        result.rows += [_row(config, job, text) for (job, _), text in zip(batch, texts)]
    result.decode_seconds = time.perf_counter() - decode_started
    return result


def _run_shards_on_gpu(args: tuple[list[EvalGenerateConfig], list[Job], int]) -> list[ShardResult]:
    configs, jobs, gpu = args
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [gpu {gpu}] %(levelname)s %(message)s")
    return run_shard_passes(configs, jobs, device=f"cuda:{gpu}", label=f"gpu {gpu}")


def load_jobs(config: EvalGenerateConfig) -> dict[str, list[Job]]:
    """Read every dataset up front: a bad row fails before any GPU time is spent."""
    jobs: dict[str, list[Job]] = {}
    for name in config.datasets:
        path = Path(config.data_dir) / config.file_pattern.format(name=name)
        rows = read_jsonl(path, validate=validate_target_row).rows
        jobs[name] = []
        for i, row in enumerate(rows):
            prompt, reference = split_prompt_target(row)
            jobs[name].append(Job(dataset=name, index=i, prompt=prompt, reference=reference))
    return jobs


def workers_for(config: EvalGenerateConfig) -> int:
    """GPU worker processes to start (0 = in-process on the CPU)."""
    # heavy: loads torch
    import torch

    if config.num_gpus <= 0:
        return 0
    available = torch.cuda.device_count()
    if available == 0:
        log.warning("--num-gpus %d but no CUDA device: generating on the CPU in-process", config.num_gpus)
        return 0
    if config.num_gpus > available:
        log.warning("--num-gpus %d but only %d CUDA devices: using %d", config.num_gpus, available, available)
    return min(config.num_gpus, available)


def run(config: EvalGenerateConfig) -> dict[str, dict[str, Any]]:
    """Generate for every dataset; returns per-dataset stats (rows, errors, seconds, tokens/s)."""
    return run_passes([config])[0]


#: The settings that may differ between the passes of one :func:`run_passes` call.
PASS_SETTINGS = ("output_dir", "decode")


def run_passes(configs: list[EvalGenerateConfig]) -> list[dict[str, dict[str, Any]]]:
    """Several decodings of the same rows by the same model (say greedy, then K samples at a temperature), each
    written as :func:`run` writes one, with one worker start and one model load per GPU for all of them.

    The configs may differ only in :data:`PASS_SETTINGS`. Each pass's ``eval_generate_config.json`` has its own
    ``decode_seconds`` / ``decode_tokens_per_second`` (its decoding loop) and ``generated_tokens``; ``seconds``
    is the whole call (worker start, model load, every pass) and ``tokens_per_second`` every pass's tokens over
    it; ``passes`` says how many shared it. Returns each pass's per-dataset stats."""

    if not configs:
        raise ValueError("run_passes needs at least one config")
    first = configs[0]
    shared = [f.name for f in fields(first) if f.name not in PASS_SETTINGS]
    for i, config in enumerate(configs[1:], start=2):
        differ = [name for name in shared if getattr(config, name) != getattr(first, name)]
        if type(config) is not type(first) or differ:
            raise ConfigError(f"pass {i} differs from pass 1 in {', '.join(differ) or 'its type'}: the passes of "
                              f"one call share everything but {', '.join(PASS_SETTINGS)}")
    outputs = [config.output_dir for config in configs]
    if len(set(outputs)) != len(outputs):
        raise ConfigError("two passes write to the same folder", key="--output-dir")
    for config in configs:
        check_output_dir(config.output_dir, "--output-dir")  # before any work: a bad path fails in a second
    spec = read_spec(first.model_path, mask_token_id=first.mask_token_id)
    if get_family(spec.family).block_causal:
        for config in configs:
            spec.require_diffusion(config.decode.block_length, rules=config.decode.sdar_rules)
    jobs_by_dataset = load_jobs(first)
    all_jobs = [job for jobs in jobs_by_dataset.values() for job in jobs]
    workers = workers_for(first)
    started = time.perf_counter()
    if workers == 0:
        shards = [run_shard_passes(configs, all_jobs, device="cpu")]
    else:

        per_gpu: list[list[Job]] = [[] for _ in range(workers)]
        for jobs in jobs_by_dataset.values():
            for i, job in enumerate(jobs):
                per_gpu[i % workers].append(job)
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            shards = list(pool.map(_run_shards_on_gpu, [(configs, per_gpu[g], g) for g in range(workers)]))
    elapsed = time.perf_counter() - started
    all_tokens = sum(s.tokens for gpu in shards for s in gpu)
    return [_write_pass(config, [gpu[i] for gpu in shards], jobs_by_dataset, workers, elapsed, all_tokens,
                        len(configs)) for i, config in enumerate(configs)]


def _write_pass(config: EvalGenerateConfig, shards: list[ShardResult], jobs_by_dataset: dict[str, list[Job]],
                workers: int, elapsed: float, all_tokens: int, passes: int) -> dict[str, dict[str, Any]]:
    """One pass's ``<name>_outputs.jsonl`` files and ``eval_generate_config.json``; returns its stats."""
    out_dir = Path(config.output_dir)
    by_dataset: dict[str, list[dict]] = {name: [] for name in config.datasets}
    for shard in shards:
        for r in shard.rows:
            by_dataset[r.pop("_dataset")].append(r)
    stats = {}
    for name in config.datasets:
        mine = sorted(by_dataset[name], key=lambda r: r["index"])
        if len(mine) != len(jobs_by_dataset[name]):
            raise RuntimeError(f"{name}: {len(jobs_by_dataset[name])} rows in, {len(mine)} out")
        path = out_dir / f"{name}_outputs.jsonl"
        write_jsonl(path, mine)
        errors = sum(r["prediction_raw"].startswith("ERROR") for r in mine)
        skipped = sum(bool(r.get("skipped_overlong")) for r in mine)
        stats[name] = {"rows": len(mine), "errors": errors, "skipped_overlong": skipped, "output": str(path)}
        log.info("%s: %d rows -> %s (%d ERROR rows, %d %s rows)", name, len(mine), path, errors, skipped,
                 SKIPPED_OVERLONG)
    tokens = sum(s.tokens for s in shards)
    # Workers decode side by side: the slowest one's loop is the decoding time of the pass.
    decoding = max((s.decode_seconds for s in shards), default=0.0)
    summary = {"config": config_dict(config), "workers": workers, "passes": passes, "seconds": round(elapsed, 2),
               "generated_tokens": tokens, "tokens_per_second": round(all_tokens / max(elapsed, 1e-9), 1),
               "decode_seconds": round(decoding, 2),
               "decode_tokens_per_second": round(tokens / decoding, 1) if decoding > 0 else None,
               "prompts_truncated": sum(s.truncated for s in shards),
               "prompts_skipped_overlong": sum(s.skipped_overlong for s in shards),
               "prompt_budget": config.prompt_budget(), "datasets": stats}
    write_json(out_dir / "eval_generate_config.json", summary)
    log.info("generated %d tokens, decoding %.1fs (%s tok/s); the call: %d pass(es) in %.1fs with %d worker(s)",
             tokens, decoding, summary["decode_tokens_per_second"], passes, elapsed, max(workers, 1))
    return stats
