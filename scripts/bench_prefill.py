"""Joins of GRPO-shaped prompts into the decode engine: prefill tokens/s with and without the prefix cache, and
where the time goes (``--profile``: the top operators by device time and by host time).

The prompts are the trace's (:func:`bench_wm_trace.rollouts_of`: GRPO groups of rollouts over an env's world-model
rows), taken turn by turn within each group as a GRPO step sends them; every ``--join`` of them are admitted
together, so one engine step prefills them (and decodes one unit: ``max_tokens`` 1). Printed per arm, and written
to ``--out``: joins, prompt tokens taken and computed, seconds in prefills, prompt and computed tokens/s, ms a join.

    python scripts/bench_prefill.py --rows data/samples/sciworld_wm_train.jsonl --groups 4 --join 8   # CPU, tiny SDAR
    python scripts/bench_prefill.py --rows runs/alfworld_data/wm_train.jsonl --model-path outputs/sdar_sft \\
        --device cuda --groups 8 --join 8 --profile
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_wm_trace import prompt_ids_of, rollouts_of, tiny_model_for, trace_prompts

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_json
from textwm.generation.engine import DecodeEngine
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model


def run_arm(lm, prompts: list[list[int]], *, join: int, max_len: int, cache: bool, settings: DecodeSettings,
            profile: bool) -> dict:
    engine = DecodeEngine(lm.model, lm.spec, max_rows=join, max_len=max_len, prefix_cache_tokens=None if cache else 0)
    if engine.net.device.type == "cuda":
        engine.warm_up(settings)
    profiler = None
    if profile:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if engine.net.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
        profiler.__enter__()
    started = time.perf_counter()
    for start in range(0, len(prompts), join):
        for i, prompt in enumerate(prompts[start:start + join]):
            engine.admit(i, prompt, settings, 1)
        while engine.num_active:
            engine.step()
    seconds = time.perf_counter() - started
    if profiler is not None:
        profiler.__exit__(None, None, None)
    s, p = engine.stats, engine.prompt_stats
    joins = -(-len(prompts) // join)
    out = {"cache": cache, "joins": joins, "prompt_tokens": p.prompt_tokens, "computed_tokens": p.computed_tokens,
           "hit_tokens": p.hit_tokens, "seconds": round(seconds, 3), "prefill_s": round(s.prefill_s, 3),
           "step_s": round(s.decode_s, 3),
           "prompt_tokens_per_prefill_s": round(p.prompt_tokens / max(s.prefill_s, 1e-9), 1),
           "computed_tokens_per_prefill_s": round(p.computed_tokens / max(s.prefill_s, 1e-9), 1),
           "ms_per_join": round(1000 * s.prefill_s / joins, 2)}
    if profiler is not None:
        averages = profiler.key_averages()
        on_device = engine.net.device.type == "cuda"
        out["top_device"] = averages.table(sort_by="self_cuda_time_total" if on_device else "self_cpu_time_total",
                                           row_limit=15)
        out["top_host"] = averages.table(sort_by="cpu_time_total", row_limit=15)
    return out


@dataclass
class PrefillBenchConfig:
    rows: list[str] = option(help="world-model rows (.jsonl) of one or more envs")
    groups: int = option(8, "GRPO groups (tasks)")
    group_size: int = option(8, "rollouts per group")
    max_turns: int = option(8, "turns per rollout at most (0: the episode's)")
    join: int = option(8, "prompts admitted together (one prefill)")
    seed: int = option(0, "seed of the tasks drawn")
    model_path: str | None = option(None, "default: a tiny random SDAR model built here")
    device: str = option("cpu", "cpu, cuda, ...")
    dtype: str = option("auto", "the model's dtype")
    max_model_len: int = option(4096, "prompt + answer at most (longer prompts are left out)")
    block_length: int = option(4, "SDAR block length")
    arms: list[str] = option(help="with and without the prefix cache", default_factory=lambda: ["cache", "nocache"],
                             choices=("cache", "nocache"))
    profile: bool = option(False, "print the top operators of each arm (torch.profiler)")
    out: str = option("runs/bench_prefill.json", "the figures (JSON)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(PrefillBenchConfig, prog="scripts/bench_prefill.py", description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    rows = [row for path in args.rows for row in read_jsonl(path).rows]
    try:
        rollouts = rollouts_of(rows, groups=args.groups, group_size=args.group_size, seed=args.seed,
                               max_turns=args.max_turns, where=", ".join(args.rows))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = args.model_path or tiny_model_for(rows, Path(tempfile.mkdtemp(prefix="bench_prefill_")) / "model")
    encode = prompt_ids_of(model)
    all_prompts = [encode(prompt) for prompt in trace_prompts(rollouts)]
    prompts = [ids for ids in all_prompts if len(ids) < args.max_model_len]
    if len(prompts) < len(all_prompts):   # counted, so the figures say what they cover
        print(f"{len(all_prompts) - len(prompts)} of {len(all_prompts)} prompts left out: not shorter than "
              f"--max-model-len {args.max_model_len}")
    lm = load_model(model, device=args.device, dtype=args.dtype)
    settings = DecodeSettings(gen_length=1, temperature=0, block_length=args.block_length, denoising_steps=1)
    report = {"settings": dict(vars(args)), "model": model, "family": lm.spec.family, "prompts": len(prompts),
              "prompts_left_out": len(all_prompts) - len(prompts),
              "arms": []}
    print(f"{len(prompts)} prompts ({sum(map(len, prompts))} tokens) in joins of {args.join}, {lm.spec.family}")
    for arm in args.arms:
        got = run_arm(lm, prompts, join=args.join, max_len=args.max_model_len, cache=arm == "cache",
                      settings=settings, profile=args.profile)
        report["arms"].append(got)
        print(f"{arm:8s}: {got['joins']} joins, {got['prompt_tokens']} prompt tokens, {got['computed_tokens']} "
              f"computed; prefills {got['prefill_s']} s ({got['ms_per_join']} ms a join), steps {got['step_s']} s; "
              f"{got['prompt_tokens_per_prefill_s']:.0f} prompt tok/s, {got['computed_tokens_per_prefill_s']:.0f} "
              "computed tok/s", flush=True)
        for key in ("top_device", "top_host"):
            if key in got:
                print(got[key], flush=True)
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
