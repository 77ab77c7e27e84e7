"""Decode throughput of the SDAR and WeDLM decoders vs HF `generate` (AR) on the *same* random weights (GPU).

A random model of a named shape (default: Qwen3-8B, bf16) decodes random prompts of PROMPT_LEN
tokens for NEW_TOKENS tokens at each batch size; SDAR with block 4 and 1 and 4 denoising steps;
WeDLM streaming decoding with a window of 16 at two entropy thresholds that bound its speed on
random weights (whose entropy is ~log V): 0.4, the default, fills one mask per forward (its
slowest), and 1000 fills every mask at once (its fastest: a window per forward, since the forward that
commits a window also decodes the masks refilled behind it, as Tencent/WeDLM does); AR with HF
generate's default dynamic KV cache; all greedy. Stop ids are disabled so every row generates
exactly NEW_TOKENS tokens. Prints one line per configuration and writes JSON.

    python scripts/bench_decode.py --size qwen3-8b --batch-sizes 1 32 --out runs/bench_decode.json
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import ModelSpec
from textwm.models.tiny import tiny_config


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="qwen3-8b")
    p.add_argument("--vocab-size", type=int, default=151936)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--block-length", type=int, default=4)
    p.add_argument("--steps", type=int, nargs="+", default=[1, 4])
    p.add_argument("--window", type=int, default=16, help="WeDLM window")
    p.add_argument("--entropy-thresholds", type=float, nargs="+", default=[0.4, 1000.0])
    p.add_argument("--out", default="runs/bench_decode.json")
    args = p.parse_args()
    assert torch.cuda.is_available(), "this benchmark needs a GPU"
    torch.manual_seed(0)
    mask_id = args.vocab_size - 1
    config = tiny_config(args.size, vocab_size=args.vocab_size, family="sdar", block_size=args.block_length,
                         mask_token_id=mask_id, pad_token_id=0, eos_token_id=None)
    config.tie_word_embeddings = False
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    n_params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    spec = ModelSpec(path="random", family="sdar", model_type="sdar", block_size=args.block_length,
                     mask_token_id=mask_id, stop_ids=(), pad_token_id=0)
    sdar = SDARDecoder(model, spec)
    wedlm = WeDLMDecoder(model, ModelSpec(**{**spec.__dict__, "family": "wedlm"}))
    print(f"{args.size}: {n_params / 1e9:.2f}B parameters, {weight_bytes / 1e9:.1f} GB bf16, "
          f"{torch.cuda.get_device_name()}", flush=True)
    results = []

    def timed(fn):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        return out, time.perf_counter() - start

    for bsz in args.batch_sizes:
        prompts = torch.randint(1, mask_id, (bsz, args.prompt_len)).tolist()
        ids = torch.tensor(prompts, device="cuda")
        with torch.no_grad():
            model.generate(input_ids=ids[:, :16], max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
            out, secs = timed(lambda ids=ids: model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                                     max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                                     do_sample=False, eos_token_id=None, pad_token_id=0))
        new = out.shape[1] - args.prompt_len
        results.append({"decoder": "ar_hf_generate", "batch": bsz, "steps": None, "seconds": secs,
                        "tokens_per_s": bsz * new / secs, "forwards": new})
        print(f"AR   hf generate   batch {bsz:3d}: {bsz * new / secs:9.1f} tok/s ({secs:.2f} s)", flush=True)
        for steps in args.steps:
            settings = DecodeSettings(gen_length=args.new_tokens, temperature=0, block_length=args.block_length,
                                      denoising_steps=steps)
            sdar.generate([x[:16] for x in prompts], DecodeSettings(gen_length=8, temperature=0,
                                                                     block_length=args.block_length, denoising_steps=steps))
            gens, secs = timed(lambda settings=settings, prompts=prompts: sdar.generate(prompts, settings))
            n_tok = sum(len(g.token_ids) for g in gens)
            results.append({"decoder": "sdar", "batch": bsz, "steps": steps, "seconds": secs,
                            "tokens_per_s": n_tok / secs, "forwards": gens[0].num_forwards})
            print(f"SDAR block {args.block_length} steps {steps} batch {bsz:3d}: {n_tok / secs:9.1f} tok/s "
                  f"({secs:.2f} s, {gens[0].num_forwards} forwards)", flush=True)
        for threshold in args.entropy_thresholds:
            settings = DecodeSettings(gen_length=args.new_tokens, temperature=0, window_size=args.window,
                                      entropy_threshold=threshold)
            wedlm.generate([x[:16] for x in prompts], DecodeSettings(gen_length=8, temperature=0))
            gens, secs = timed(lambda settings=settings, prompts=prompts: wedlm.generate(prompts, settings))
            n_tok = sum(len(g.token_ids) for g in gens)
            results.append({"decoder": "wedlm", "batch": bsz, "window": args.window, "entropy_threshold": threshold,
                            "seconds": secs, "tokens_per_s": n_tok / secs, "forwards": gens[0].num_forwards})
            print(f"WeDLM window {args.window} tau {threshold:g} batch {bsz:3d}: {n_tok / secs:9.1f} tok/s "
                  f"({secs:.2f} s, {gens[0].num_forwards} forwards)", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"size": args.size, "parameters": n_params, "prompt_len": args.prompt_len,
                               "new_tokens": args.new_tokens, "gpu": torch.cuda.get_device_name(),
                               "torch": torch.__version__, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
