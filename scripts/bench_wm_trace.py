"""Replay of GRPO-shaped world-model traffic against fresh servers (native, or lmdeploy): generated and prompt tokens/s, the
prefix cache's hit rate, latency percentiles, and how much the figures move from one fresh server to the next.

The trace is built from an env's world-model rows (``<env>/build_wm_dataset.py``'s ``wm_*.jsonl``: one row per
transition, keyed by ``task_id``, ``step`` and, where a task has several, ``episode``), the prompts exactly as the rows hold them. A GRPO
group is one task: its ``--group-size`` rollouts follow the task's episodes in turn (rollout g plays episode
g mod the task's episode count, so a task with fewer episodes than rollouts repeats some, as rollouts that take
the same actions do), each rollout sending its turns one after the other, each turn's request after the last
answer. ``--concurrency`` rollouts are in flight (GRPO's groups in flight times the group size), taken group by
group. Every turn asks for ``--max-tokens`` tokens, greedy.

Each of ``--servers`` fresh servers replays ``--replays`` disjoint sets of ``--groups`` groups, one after the
other: the first replay meets a server that has served nothing, the later ones a warm one (their prompts are not
the first's, so the cache holds only what they share with it). Printed per replay, and written to ``--out``:
requests, failures (must be 0), generated and prompt tokens/s, p50 / p99 latency, and the prompt tokens the
server took from its prefix cache (``/metrics``), beside the most a server could have taken by sharing prefixes
in 64-token blocks and repeated prompts whole (a prompt sent before, and every block whose whole prefix was sent
before, to the same server, earlier replays included, in the trace's order: an upper bound).

    python scripts/bench_wm_trace.py --rows data/samples/sciworld_wm_train.jsonl --groups 4 --group-size 8 \\
        --concurrency 16 --max-tokens 16 --max-turns 6                         # CPU: a tiny random SDAR model
    python scripts/bench_wm_trace.py --rows runs/alfworld_data/wm_train.jsonl --model-path runs/sdar/final \\
        --device cuda --groups 8 --group-size 8 --concurrency 64 --max-tokens 64 --servers 3 --replays 2
    ... --server-args "--no-prefix-cache"                                      # the same without the cache
    ... --backend lmdeploy --server-args "--enable-prefix-caching"             # lmdeploy, its prefix cache on

lmdeploy exports none of the native server's counters: its cache hits, steps and graphs are not reported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_wm_stack import Connection, engine_counters, pct, server_metrics, start_backend

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_json

#: The prefix cache's block (``DecodeEngine``'s default): the upper bound counts whole blocks.
BLOCK = 64


def rollouts_of(rows: list[dict], *, groups: int, group_size: int, seed: int, max_turns: int = 0,
                where: str = "rows") -> list[list[list[dict]]]:
    """``groups`` GRPO groups of ``group_size`` rollouts each, from ``rows``: ``[group][rollout][turn]`` the turn's
    prompt (the row's messages without its answer). Tasks are drawn with ``seed``; raises ValueError naming the
    row when one lacks ``task_id``, ``step`` or ``messages``."""
    episodes: dict[str, dict[str, list[tuple[int, list[dict]]]]] = defaultdict(lambda: defaultdict(list))
    for i, row in enumerate(rows, 1):
        missing = [k for k in ("task_id", "step", "messages") if k not in row]
        if missing:
            raise ValueError(f"{where}: row {i} has no {', '.join(missing)} (a world-model row of "
                             f"<env>/build_wm_dataset.py has each)")
        messages = row["messages"]
        messages = json.loads(messages) if isinstance(messages, str) else messages
        # A row without ``episode`` is of its task's one episode (AppWorld's rows).
        episodes[row["task_id"]][row.get("episode", row["task_id"])].append((int(row["step"]), messages[:-1]))
    tasks = sorted(episodes)
    random.Random(seed).shuffle(tasks)
    if len(tasks) < groups:
        raise ValueError(f"{where}: {len(tasks)} tasks, fewer than the {groups} groups asked for")
    out = []
    for task in tasks[:groups]:
        plays = [[prompt for _, prompt in sorted(turns, key=lambda t: t[0])] for _, turns in
                 sorted(episodes[task].items())]
        group = [plays[g % len(plays)] for g in range(group_size)]
        out.append([turns[:max_turns] if max_turns else turns for turns in group])
    return out


def shareable_tokens(prompts_ids: list[list[int]], block: int = BLOCK, seen: set[bytes] | None = None) -> int:
    """Tokens of ``prompts_ids`` (in order) that a server sharing prefixes could serve: the whole of a prompt sent
    before (the engine computes prompts that join together once), else each whole block whose chain of blocks up
    to it was sent before (the last token of a prompt is always computed). ``seen``: the prompts and blocks sent
    before these prompts (earlier replays on the same server); it is added to."""
    seen = set() if seen is None else seen
    total = 0
    for ids in prompts_ids:
        whole = b"prompt" + hashlib.blake2b(repr(ids).encode(), digest_size=16).digest()
        if whole in seen:
            total += len(ids)
            continue
        seen.add(whole)
        key = hashlib.blake2b(digest_size=16)
        for start in range(0, (len(ids) - 1) // block * block, block):
            key.update(repr(ids[start:start + block]).encode())
            digest = key.copy().digest()
            if digest in seen:
                total += block
            else:
                seen.add(digest)
    return total


async def replay(url: str, rollouts: list[list[list[dict]]], *, concurrency: int, max_tokens: int) -> dict:
    """Every rollout's turns in order, ``concurrency`` rollouts at a time; latencies and usage of the answers."""
    queue = [turns for group in rollouts for turns in group][::-1]
    latencies: list[float] = []
    failures: list[str] = []
    generated = prompt = 0

    async def worker() -> None:
        nonlocal generated, prompt
        conn = Connection(url)
        while queue:
            turns = queue.pop()
            for messages in turns:
                body = {"model": "bench-wm", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                        "chat_template_kwargs": {"enable_thinking": False}}
                started = time.perf_counter()
                try:
                    status, payload = await asyncio.wait_for(conn.post(body), 600)
                except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                    conn.close()
                    continue
                if status != 200:
                    failures.append(f"HTTP {status}: {payload[:200]!r}")
                    continue
                latencies.append(time.perf_counter() - started)
                usage = json.loads(payload).get("usage") or {}
                generated += usage.get("completion_tokens", 0)
                prompt += usage.get("prompt_tokens", 0)
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    return {"requests": len(latencies) + len(failures), "failed": len(failures), "first_failures": failures[:3],
            "seconds": round(seconds, 2), "generated_tokens_per_s": round(generated / seconds, 1),
            "prompt_tokens_per_s": round(prompt / seconds, 1), "prompt_tokens": prompt,
            "p50_ms": round(pct(latencies, 50), 1), "p99_ms": round(pct(latencies, 99), 1)}


def cache_counters(port: int) -> dict[str, float]:
    """The native server's prompt-token counters, its CUDA graphs, compiles and warm-up seconds (``/metrics``)."""
    names = ("prompt_tokens_total", "prefix_cache_hit_tokens_total", "prompt_tokens_computed_total", "cuda_graphs",
             "compiles",
             "warm_up_seconds", "prefill_seconds_total", "step_seconds_total", "prefill_forwards_total",
             "prefill_forwards_unbucketed_total")
    return server_metrics(port, {name: name for name in names})


def trace_prompts(rollouts: list[list[list[list[dict]]]]) -> list[list[dict]]:
    """The turns' prompts in the order a GRPO step sends them: group by group, turn by turn, rollout by rollout."""
    return [turns[t] for group in rollouts for t in range(max(len(r) for r in group)) for turns in group
            if t < len(turns)]


def tiny_model_for(rows: list[dict], folder: Path) -> str:
    """A tiny random SDAR checkpoint whose tokenizer is trained on ``rows``' messages (the CPU default model)."""
    from textwm.models.tiny import (
        build_tiny_checkpoint,  # torch and transformers: only when no model is given
    )

    texts = [m["content"] for row in rows[:200] for m in (json.loads(row["messages"])
                                                          if isinstance(row["messages"], str) else row["messages"])]
    return str(build_tiny_checkpoint(folder, texts, family="sdar", vocab_size=600))


def prompt_ids_of(model: str):
    """A function from chat messages to the prompt's token ids, as the native server builds them."""
    from transformers import AutoTokenizer

    from textwm.data.chat_encoder import ChatEncoder

    encoder = ChatEncoder(AutoTokenizer.from_pretrained(model))
    return encoder.prompt_ids


@dataclass
class TraceBenchConfig:
    rows: list[str] = option(help="world-model rows (.jsonl) of one or more envs")
    groups: int = option(8, "GRPO groups (tasks) per replay")
    group_size: int = option(8, "rollouts per group (GRPO's num_generations)")
    max_turns: int = option(0, "turns per rollout at most (0: the episode's)")
    concurrency: int = option(64, "rollouts in flight")
    max_tokens: int = option(64, "tokens per answer")
    servers: int = option(1, "fresh servers, one after another")
    replays: int = option(2, "disjoint trace parts replayed on each server")
    seed: int = option(0, "seed of the tasks drawn")
    model_path: str | None = option(None, "default: a tiny random SDAR model built here")
    device: str = option("cpu", "the native server's device")
    max_batch_size: int = option(64, "the server's rows decoded together")
    max_model_len: int = option(4096, "the server's prompt + answer limit")
    backend: str = option("native", "the server replayed against", choices=("native", "lmdeploy"))
    dllm_block_length: int | None = option(None, "SDAR under lmdeploy's rules (both backends): block length")
    dllm_denoising_steps: int | None = option(None, "... denoising steps")
    dllm_unmasking_strategy: str | None = option(None, "... unmasking strategy")
    server_args: str = option("", "more flags for the server, e.g. '--no-prefix-cache' (native), "
                                  "'--enable-prefix-caching' (lmdeploy)")
    lmdeploy_cache_share: float = option(0.5, "lmdeploy --cache-max-entry-count")
    start_timeout: float = option(600, "seconds a server may take to report healthy")
    out: str = option("runs/bench_wm_trace.json", "the figures (JSON)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(TraceBenchConfig, prog="scripts/bench_wm_trace.py", description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    rows = [row for path in args.rows for row in read_jsonl(path).rows]
    try:
        parts = rollouts_of(rows, groups=args.groups * args.replays, group_size=args.group_size, seed=args.seed,
                            max_turns=args.max_turns, where=", ".join(args.rows))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parts = [parts[r * args.groups:(r + 1) * args.groups] for r in range(args.replays)]
    tmp = Path(tempfile.mkdtemp(prefix="bench_trace_"))
    model = args.model_path or tiny_model_for(rows, tmp / "model")
    encode = prompt_ids_of(model)
    bounds, sent = [], set()   # a server replays the parts in turn: a part's bound counts the earlier parts' blocks
    for part in parts:
        ids = [encode(prompt) for prompt in trace_prompts(part)]
        bounds.append({"prompt_tokens": sum(map(len, ids)), "shareable_tokens": shareable_tokens(ids, seen=sent)})
    report = {"settings": dict(vars(args)), "model": model,
              "upper_bound": bounds, "servers": []}
    print(f"trace: {args.replays} x {args.groups} groups x {args.group_size} rollouts; requests per replay "
          f"{[sum(len(t) for g in part for t in g) for part in parts]}; prompt tokens "
          f"{[b['prompt_tokens'] for b in bounds]}, at most {[b['shareable_tokens'] for b in bounds]} cacheable")
    # start_backend's knobs: a queue that holds the whole trace
    args.requests = sum(len(t) for part in parts for g in part for t in g)
    native = args.backend == "native"
    if native:
        args.server_args = f"--max-tokens {args.max_tokens} {args.server_args}"
    else:
        args.lmdeploy_args = args.server_args
    for s in range(args.servers):
        process, spec = start_backend(args.backend, model, args, tmp)
        runs = []
        try:
            for r, part in enumerate(parts):
                if native:
                    before, steps_before = cache_counters(spec.port), engine_counters(spec.port)
                got = asyncio.run(replay(f"http://127.0.0.1:{spec.port}/v1/chat/completions", part,
                                         concurrency=args.concurrency, max_tokens=args.max_tokens))
                if not native:
                    runs.append(got)
                    print(f"server {s + 1} replay {r + 1}: {got['requests']} requests, {got['failed']} failed, "
                          f"{got['generated_tokens_per_s']:8.1f} generated tok/s, {got['prompt_tokens_per_s']:9.1f} "
                          f"prompt tok/s, p50 {got['p50_ms']:7.1f} ms, p99 {got['p99_ms']:7.1f} ms", flush=True)
                    continue
                after, steps_after = cache_counters(spec.port), engine_counters(spec.port)
                hit = after["prefix_cache_hit_tokens_total"] - before["prefix_cache_hit_tokens_total"]
                taken = after["prompt_tokens_total"] - before["prompt_tokens_total"]
                got.update(cache_hit_tokens=int(hit), cache_hit_share=round(hit / max(taken, 1), 4),
                           upper_bound_share=round(bounds[r]["shareable_tokens"] / max(bounds[r]["prompt_tokens"], 1),
                                                   4),
                           engine_steps_per_s=round((steps_after["steps"] - steps_before["steps"]) / got["seconds"], 1),
                           # graphs captured while this replay's requests waited (0 after a warm-up of every shape)
                           graphs_captured=int(after["cuda_graphs"] - before["cuda_graphs"]),
                           # ... and compiles (torch.compile graphs, attention-kernel variants; -1: not countable)
                           compiles=(-1 if min(after["compiles"], before["compiles"]) < 0
                                     else int(after["compiles"] - before["compiles"])),
                           warm_up_s=round(after["warm_up_seconds"], 2),
                           # where the engine's time went: prefills of joining rows, decode steps
                           prefill_s=round(after["prefill_seconds_total"] - before["prefill_seconds_total"], 2),
                           step_s=round(after["step_seconds_total"] - before["step_seconds_total"], 2),
                           # prefill forwards, and those eager at the prompts' shape (wider than a bucketed one)
                           prefill_forwards=int(after["prefill_forwards_total"] - before["prefill_forwards_total"]),
                           eager_prefills=int(after["prefill_forwards_unbucketed_total"]
                                              - before["prefill_forwards_unbucketed_total"]))
                runs.append(got)
                print(f"server {s + 1} replay {r + 1}: {got['requests']} requests, {got['failed']} failed, "
                      f"{got['generated_tokens_per_s']:8.1f} generated tok/s, {got['prompt_tokens_per_s']:9.1f} prompt "
                      f"tok/s, p50 {got['p50_ms']:7.1f} ms, p99 {got['p99_ms']:7.1f} ms, cache {got['cache_hit_share']:.3f}"
                      f" of prompt tokens (at most {got['upper_bound_share']:.3f}), {got['engine_steps_per_s']} steps/s, "
                      f"{got['graphs_captured']} graphs captured and {got['compiles']} compiles (warm-up {got['warm_up_s']} s), "
                      f"engine: prefill "
                      f"{got['prefill_s']} s ({got['prefill_forwards']} forwards, {got['eager_prefills']} eager), "
                      f"steps {got['step_s']} s",
                      flush=True)
        finally:
            process.stop()
        report["servers"].append(runs)
    if args.servers > 1:
        for r in range(args.replays):
            rates = [runs[r]["generated_tokens_per_s"] for runs in report["servers"]]
            report.setdefault("spread", []).append(round(max(rates) / max(min(rates), 1e-9), 3))
        print(f"fresh servers' generated tok/s, max / min, per replay: {report['spread']}")
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0 if all(run["failed"] == 0 for runs in report["servers"] for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
