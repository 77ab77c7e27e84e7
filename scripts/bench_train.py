"""Training throughput and memory of the one trainer's step for AR, SDAR and WeDLM, with and without
each speed / memory switch. One process, one GPU, random weights of a named Qwen3 shape.

Every arm runs the trainer's own code for a step - the objective's collation and loss
(:mod:`textwm.training.objectives`), the switches of :mod:`textwm.training.speedups`, bf16 autocast
over fp32 master weights, gradient clipping and the optimizer - on the same synthetic packed rows
(samples of 256-1,024 tokens, ``--answer-share`` of them answer, packed to ``--cutoff``), without the HF
Trainer's loop around it. It prints, per arm: tokens/s (real input tokens, not the noisy copy), step time, model
TFLOP/s and MFU against ``--peak-tflops``, peak allocated memory, the trainer's memory estimate
(:mod:`textwm.training.memory`) and the first step's loss (equal across the arms of one model up to
bf16 rounding: the switches must not change the loss).

FLOPs per step count what the model must compute, not what it recomputes: 6 x (decoder matmul
parameters) x (tokens processed: the clean input and the part of the SDAR / WeDLM noisy copy the objective
computes), plus attention (12 x q width x the (query, key) pairs the mask allows, per layer, the noisy copy's
share of them scaled by the share of its blocks computed), plus the output projection at the loss positions
only (6 x hidden x vocab each).

A variant is ``plain`` or atoms joined by ``+``: ``chunked`` (loss_impl), ``fused`` (optim
adamw_torch_fused), ``bnb8`` (adamw_bnb_8bit), ``liger``, ``compile``, ``ckpt`` (full checkpointing),
``ops`` (selective: ops), ``every2`` (checkpoint every 2nd layer), ``offload``, ``fullcopy`` (the whole noisy
copy, every block, as upstream lays it out: :mod:`textwm.diffusion.noisy_stream`). Arms with ``liger`` run
last (liger patches the transformers module for the rest of the process).

    python scripts/bench_train.py --sizes qwen3-1.7b --objectives ar sdar wedlm --cutoff 4096 --rows 4 \\
        --variants plain chunked+fused chunked+fused+compile chunked+fused+liger+compile --out bench_train.json
    python scripts/bench_train.py --device cpu --sizes tiny --cutoff 256 --rows 2 --steps 2   # CPU smoke
"""

import gc
import json
import random
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from textwm.config import ConfigCLI, option
from textwm.diffusion.masks import packed_causal_mask_mod, sdar_mask_mod
from textwm.diffusion.noisy_stream import blocks_with_a_mask
from textwm.models import sdar, wedlm  # noqa: F401  (register the sdar, sdar_moe and wedlm model types)
from textwm.models.tiny import SIZES, tiny_config
from textwm.training import memory, speedups
from textwm.training.config import SFTConfig
from textwm.training.data import Sample, TrainingRow, TrainingRows
from textwm.training.trainer import build_objective

ATOMS = {
    "chunked": {"loss_impl": "chunked"},
    "fused": {"optim": "adamw_torch_fused"},
    "bnb8": {"optim": "adamw_bnb_8bit"},
    "liger": {"enable_liger_kernel": True},
    "compile": {"torch_compile": True},
    "ckpt": {"gradient_checkpointing": True},
    "ops": {"gradient_checkpointing": True, "gradient_checkpointing_mode": "ops"},
    "every2": {"gradient_checkpointing": True, "gradient_checkpointing_every": 2},
    "offload": {"activation_offload": True},
    "fullcopy": {},          # not a config key: the objective's trim_noisy_copy off (run_arm)
}
BLOCK = {"ar": 4, "sdar": 4, "wedlm": 32}


def variant_overrides(variant: str) -> dict:
    if variant == "plain":
        return {}
    out: dict = {}
    for atom in variant.split("+"):
        if atom not in ATOMS:
            raise SystemExit(f"--variants: unknown atom {atom!r} in {variant!r} (known: plain, {', '.join(ATOMS)})")
        out.update(ATOMS[atom])
    return out


def synthetic_rows(rows: int, cutoff: int, vocab: int, seed: int,
                   answer_share: float = 0.3) -> tuple[list[dict], list[list[int]]]:
    """``rows`` packed rows of ``cutoff`` tokens (the trainer's row format) and each row's sample lengths.

    Samples are 256-1,024 tokens (multiples of 32, so every block size divides them), ``answer_share`` answer
    (at least 32 tokens)."""
    rng = random.Random(seed)
    built, lengths, index = [], [], 0
    for _ in range(rows):
        row, left = TrainingRow(), cutoff
        while left >= 64:
            n = min(left, rng.randrange(256, 1025, 32))
            answer = max(int(n * answer_share) // 32 * 32, 32)
            ids = [rng.randrange(2, vocab - 2) for _ in range(n)]
            row.add(Sample(prompt_ids=ids[: n - answer], answer_ids=ids[n - answer:], index=index))
            index, left = index + 1, left - n
        built.append(row)
        lengths.append([row.sample_ids.count(s) for s in range(len(row.sample_indices))])
    dataset = TrainingRows(built, seed=seed)
    return [dataset[i] for i in range(len(dataset))], lengths


def attention_pairs(objective: str, lengths: list[list[int]], block: int) -> tuple[int, int]:
    """(query, key) pairs the objective's mask allows, summed over rows and samples: (clean queries, queries
    of the whole noisy copy)."""
    clean = noisy = 0
    for n in (n for row in lengths for n in row):
        causal = n * (n + 1) // 2
        if objective == "ar":
            clean += causal
        elif objective == "sdar":   # noisy block b: its own block + clean blocks < b; clean: blocks <= b
            nb = n // block
            noisy += block * block * (nb + nb * (nb - 1) // 2)
            clean += block * block * nb * (nb + 1) // 2
        else:                       # clean stream causal; the prediction stream sees about as much
            clean += causal
            noisy += causal
    return clean, noisy


def step_flops(model, objective: str, batch: dict, lengths: list[list[int]], block: int, noisy_share: float) -> float:
    """``noisy_share``: the share of the noisy copy's tokens the objective computes (0 for AR)."""
    c = model.config
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    h, i, q, kv = c.hidden_size, c.intermediate_size, c.num_attention_heads * hd, c.num_key_value_heads * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i
    tokens = batch["input_ids"].numel() * (1 + noisy_share)
    answer = batch["labels"] != -100
    if objective == "ar":
        positions = int(answer.sum())
    elif objective == "sdar":
        positions = int(batch["noise_mask"].sum())
    else:
        positions = int(answer.sum()) + int(batch["noise_mask"].sum())
    clean, noisy = attention_pairs(objective, lengths, block)
    attention = 12 * q * (clean + noisy * noisy_share) * c.num_hidden_layers
    return 6 * per_layer * c.num_hidden_layers * tokens + attention + 6 * h * c.vocab_size * positions


def make_optimizer(name: str, params, lr: float = 1e-4):
    if name == "adamw_bnb_8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, fused=name == "adamw_torch_fused" or None)


def run_arm(args, size: str, objective: str, variant: str, vocab: int) -> dict:
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    attn = "flex_attention" if cuda else "sdpa"
    block = BLOCK[objective]
    config = SFTConfig(model_name_or_path="bench", train_file="bench", objective=objective, block_length=block,
                       cutoff_len=args.cutoff, per_device_train_batch_size=args.rows, bf16=cuda, memory_check="off",
                       **variant_overrides(variant))
    row = {"size": size, "objective": objective, "variant": variant, "rows": args.rows, "cutoff": args.cutoff}
    model = optimizer = None
    try:
        speedups.check_packages(config)
        torch.manual_seed(0)
        family_config = tiny_config(size, vocab_size=vocab, family=objective, block_size=block, mask_token_id=vocab - 1,
                                    pad_token_id=0, eos_token_id=1)
        with device:
            model = AutoModelForCausalLM.from_config(family_config, attn_implementation=attn, dtype=torch.float32)
        model.train()
        obj = build_objective(config, model, attn, pad_token_id=0)
        if "fullcopy" in variant.split("+"):
            obj.trim_noisy_copy = False
        for line in speedups.apply_config(model, config):
            print(f"  [{objective} {variant}] {line}", flush=True)
        optimizer = make_optimizer(config.optim, model.parameters())
        features, lengths = synthetic_rows(args.rows, args.cutoff, vocab, seed=1, answer_share=args.answer_share)
        batch = {k: v.to(device) for k, v in obj.collate(features).items()}
        answer = int((batch["labels"] != -100).sum())
        shape = memory.ModelShape.of(model)
        noisy_share = 0.0
        if objective != "ar":
            index, valid = obj.noisy_part(blocks_with_a_mask(batch["noise_mask"], batch["position_ids"],
                                                             batch["sample_ids"], block))
            noisy_share = int(valid.sum()) / batch["input_ids"].numel()
        plan = memory.plan_for(config, row_tokens=batch["input_ids"].shape[1],
                               answer_share=answer / batch["input_ids"].numel(),
                               noisy_tokens=None if objective == "ar" else index.shape[1])
        row["noisy_share"] = round(noisy_share, 3)
        row["estimate_gib"] = round(memory.estimate(shape, plan).total / memory.GIB, 1)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        times, losses = [], []
        for _ in range(args.warmup + args.steps):
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                loss = obj.loss(model, batch, torch.tensor(answer, device=device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))   # synchronises
            times.append(time.perf_counter() - start)
        step = statistics.median(times[args.warmup:])
        flops = step_flops(model, objective, batch, lengths, block, noisy_share)
        real = int((batch["sample_ids"] >= 0).sum())
        row.update(step_s=round(step, 4), tokens_per_s=round(real / step, 1), tflops=round(flops / step / 1e12, 1),
                   mfu=round(flops / step / (args.peak_tflops * 1e12), 4), first_loss=round(losses[0], 4),
                   params_b=round(shape.params / 1e9, 3), first_step_s=round(times[0], 2))
        if cuda:
            row["peak_gib"] = round(torch.cuda.max_memory_allocated() / memory.GIB, 1)
    except torch.OutOfMemoryError:
        row["error"] = "OOM"
    except Exception as exc:  # noqa: BLE001  (a broken arm is reported and the others still run)
        traceback.print_exc()
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        del model, optimizer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        torch._dynamo.reset()
    return row


def mask_build_ms(device: torch.device, rows: int, cutoff: int, compiled: bool) -> dict[str, float | str]:
    """Milliseconds to build the AR and SDAR block masks of one batch (eager vs compiled ``create_block_mask``)."""
    from torch.nn.attention.flex_attention import create_block_mask

    from textwm.training.data import pad_batch

    features, _ = synthetic_rows(rows, cutoff, 1000, seed=1)
    batch = pad_batch(features, pad_token_id=0, multiple_of=128)
    sid, pos = batch["sample_ids"].to(device), batch["position_ids"].to(device)
    cutoff = sid.shape[1]
    sid2, pos2 = torch.cat([sid, sid], 1), torch.cat([pos, pos], 1)
    out = {}
    for name, mod, length in (("ar", packed_causal_mask_mod(sid), cutoff),
                              ("sdar", sdar_mask_mod(pos2, sid2, 4, cutoff), 2 * cutoff)):
        try:
            for _attempt in range(3):
                torch.cuda.synchronize()
                start = time.perf_counter()
                create_block_mask(mod, B=rows, H=None, Q_LEN=length, KV_LEN=length, device=device, _compile=compiled)
                torch.cuda.synchronize()
                out[name] = round((time.perf_counter() - start) * 1e3, 1)   # the last (warm) attempt
        except Exception as exc:  # noqa: BLE001  (torch 2.11's compiled builder fails on our mask_mods: shown)
            out[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120]}"
    return out


@dataclass
class TrainBenchConfig:
    sizes: list[str] = option(help="model shapes", default_factory=lambda: ["qwen3-0.6b", "qwen3-1.7b"],
                              choices=sorted(SIZES))
    objectives: list[str] = option(help="training objectives", default_factory=lambda: ["ar", "sdar", "wedlm"],
                                   choices=("ar", "sdar", "wedlm"))
    variants: list[str] = option(help="trainer settings compared",
                                 default_factory=lambda: ["plain", "chunked+fused", "chunked+fused+compile",
                                                          "chunked+fused+liger+compile"])
    cutoff: int = option(4096, "tokens per packed row")
    rows: int = option(4, "packed rows per step")
    answer_share: float = option(0.3, "answer tokens per sample (a world model's rows: ~0.05)")
    vocab: int = option(151936, "embedding rows (Qwen3's vocabulary)")
    steps: int = option(6, "timed steps (the median is reported)")
    warmup: int = option(3, "untimed steps first (compile, autotuning)")
    peak_tflops: float = option(989.0, "MFU denominator (H200 dense bf16 datasheet)")
    device: str = option("cuda", "cuda, or cpu for a smoke run")
    masks: bool = option(False, "also time building the flex block masks")
    out: str = option("", "the JSON report (and a .txt table beside it)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(TrainBenchConfig, prog="scripts/bench_train.py", description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    out = Path(args.out) if args.out else None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu for a smoke run")
    for v in args.variants:
        variant_overrides(v)
    arms = [(s, o, v) for s in args.sizes for o in args.objectives for v in args.variants]
    arms.sort(key=lambda arm: "liger" in arm[2])   # stable: liger's module patches must come last
    results = []
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    table = out.with_suffix(".txt").open("w") if out else None

    def show(line: str) -> None:
        print(line, flush=True)
        if table:
            table.write(line + "\n")
            table.flush()

    show("size        objective variant                          tok/s    step s  TFLOP/s  MFU    peak GiB  est GiB  "
          "loss0")
    for size, objective, variant in arms:
        r = run_arm(args, size, objective, variant, args.vocab)
        results.append(r)
        if "error" in r:
            show(f"{size:11s} {objective:9s} {variant:32s} {r['error']}")
            write(out, args, results)
            continue
        show(f"{size:11s} {objective:9s} {variant:32s} {r['tokens_per_s']:8.0f} {r['step_s']:8.3f} {r['tflops']:8.1f} "
              f"{r['mfu']:6.1%} {r.get('peak_gib', float('nan')):8.1f} {r['estimate_gib']:8.1f}  {r['first_loss']:.4f}")
        write(out, args, results)
    if args.masks and args.device == "cuda":
        masks = {f"compiled={c}": mask_build_ms(torch.device("cuda"), args.rows, args.cutoff, c) for c in (False, True)}
        show(f"block mask build ms: {masks}")
        write(out, args, results, mask_build_ms=masks)
    return 0


def write(out: Path | None, args, results: list[dict], **extra) -> None:
    """The JSON report so far (rewritten after every arm: a run cut short keeps what it measured)."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        report = {"args": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__, "arms": results}
        out.write_text(json.dumps(report | extra, indent=1))


if __name__ == "__main__":
    sys.exit(main())
