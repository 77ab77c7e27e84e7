"""Decode throughput of every decoder on the *same* random weights (GPU): HF ``generate`` (AR, dynamic and
static cache), the reference decoders and the static-shape engine (AR, SDAR, WeDLM).

A random model of a named shape (default Qwen3-8B, bf16) decodes random prompts of PROMPT_LEN tokens for
NEW_TOKENS tokens at each batch size, greedy, with stop ids disabled so that every row generates exactly
NEW_TOKENS tokens. SDAR: block 4 at 1 and 4 denoising steps (generate.py rules; and lmdeploy's rules at 1
step); WeDLM: window 16 at two entropy thresholds that bound its speed on random weights (whose entropy is
~log V): 0.4, the default, fills one mask per forward (its slowest), 1000 fills every mask (its fastest).

Each line gives tok/s, forwards per generated token per row, and the fraction of the weight-read roofline:
the speed if every forward took only the time to read the weights once (weight bytes / the copy bandwidth
measured at the start), at the forwards per token measured. Timings include the prefill of the prompts
(1024 tokens x batch: at batch 128 over 2 PFLOP, seconds on its own); engine runs also print their decode
steps alone ("decode only", from the engine's own clock). Engine runs are timed on their second run (the
first captures the CUDA graphs and compiles the fused layers); ``--layers fused modules`` runs each engine
line with the fused layers and with the checkpoint's modules side by side. Writes JSON.

    python scripts/bench_decode.py --size qwen3-8b --batch-sizes 1 32 128 --new-tokens 128

With ``--model-path CKPT --prompts ROWS.jsonl`` it decodes a trained checkpoint on real world-model prompts
instead (stop ids kept), e.g. a trained WeDLM against AR decoding of the same weights:

    python scripts/bench_decode.py --model-path runs/wedlm_sft --prompts data/samples/sciworld_wm_test.jsonl \
        --decoders engine_wedlm engine_ar --batch-sizes 1 32 --new-tokens 128
"""

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.chat_encoder import ChatEncoder
from textwm.data.jsonl import read_jsonl
from textwm.data.schema import split_prompt_target, validate_target_row
from textwm.generation.engine.core import BLAS_CHOICES
from textwm.generation.engine.decoder import EngineDecoder
from textwm.generation.engine.static_model import ATTENTIONS
from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import ModelSpec, load_model
from textwm.models.tiny import TINY_ARCHS, tiny_config

DECODERS = ("hf_dynamic", "hf_static", "ref_sdar", "ref_wedlm", "engine_ar", "engine_sdar", "engine_sdar_lmdeploy",
            "engine_wedlm")


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written), as the weight-read ceiling."""
    src = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    torch.cuda.synchronize()
    return 2 * src.numel() * 10 / (time.perf_counter() - start)


def kernels_per_forward(engine, *, rows: int, queries: int) -> int:
    """CUDA kernels one eager decode forward of the engine's model launches (``rows`` x ``queries`` tokens)."""
    net = engine.net
    ids = torch.ones((rows, queries), dtype=torch.long, device="cuda")
    pos = torch.arange(queries, device="cuda")[None].expand(rows, -1).contiguous()
    run = lambda: net.forward(ids, pos, pos, pos + 1, kv_len=256)   # noqa: E731
    with torch.no_grad():
        run()   # compile / warm up outside the trace
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def random_subject(args):
    """A random model of ``args.size`` (bf16, untied head), its spec without stop ids (every row decodes
    exactly ``--new-tokens``) and random prompts of ``--prompt-len``."""
    mask_id = args.vocab_size - 1
    config = tiny_config(args.size, vocab_size=args.vocab_size, family="sdar", arch=args.arch,
                         block_size=args.block_length, mask_token_id=mask_id, pad_token_id=0, eos_token_id=None)
    config.tie_word_embeddings = False
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    spec = ModelSpec(path="random", family="sdar", model_type="sdar", block_size=args.block_length,
                     mask_token_id=mask_id, stop_ids=(), pad_token_id=0)
    return model, spec, lambda bsz: torch.randint(1, mask_id, (bsz, args.prompt_len)).tolist()


def trained_subject(path: str, prompts_file: str, prompt_len: int):
    """A trained checkpoint (bf16) with its own spec (stop ids kept: rows end where the model ends them) and
    the prompts of ``prompts_file``'s rows: "batch B" decodes all of them, B rows at a time."""
    loaded = load_model(path, device="cuda", dtype="bfloat16")
    encoder = ChatEncoder(loaded.tokenizer)
    rows = read_jsonl(prompts_file, validate=validate_target_row).rows
    prompts = [encoder.prompt_ids(split_prompt_target(row)[0])[-prompt_len:] for row in rows]
    # every prompt of the file (at least bsz), decoded bsz rows at a time with continuous refill
    return loaded.model.eval(), loaded.spec, lambda bsz: [prompts[i % len(prompts)]
                                                          for i in range(max(bsz, len(prompts)))]


@dataclass
class DecodeBenchConfig:
    size: str = option("qwen3-8b", "the random model's shape")
    vocab_size: int = option(151936, "the random model's embedding rows")
    arch: str = option("qwen3", "the random model's architecture (llama: SmolLM2's)", choices=list(TINY_ARCHS))
    batch_sizes: list[int] = option(help="rows decoded together", default_factory=lambda: [1, 32, 128])
    prompt_len: int = option(1024, "prompt tokens")
    new_tokens: int = option(128, "tokens decoded per row")
    block_length: int = option(4, "SDAR block length")
    steps: list[int] = option(help="SDAR denoising steps per block", default_factory=lambda: [1, 4])
    window: int = option(16, "WeDLM window")
    entropy_thresholds: list[float] = option(help="WeDLM entropy thresholds", default_factory=lambda: [0.4, 1000.0])
    decoders: list[str] = option(help="decoders timed", default_factory=lambda: list(DECODERS), choices=DECODERS)
    attention: str = option("auto", "the engine's attention", choices=list(ATTENTIONS))
    layers: list[str] = option(help="the engine's layer math: fused kernels, the checkpoint's modules, or both side "
                                    "by side", default_factory=lambda: ["fused"], choices=("fused", "modules"))
    model_path: str | None = option(None, "a trained checkpoint instead of random weights (its family, stop ids and "
                                          "tokenizer); pair with --prompts")
    prompts: str | None = option(None, "chat-format rows (.jsonl) whose prompts the trained checkpoint decodes, "
                                       "cycled to fill each batch and cut to their last --prompt-len tokens")
    blas: str = option("auto", "the engine's BLAS library (DecodeEngine blas: auto = cuBLASLt on CUDA); the HF and "
                               "reference decoders run with torch's default", choices=list(BLAS_CHOICES))
    out: str = option("runs/bench_decode.json", "the figures (JSON)")

    def __post_init__(self) -> None:
        if (self.model_path is None) != (self.prompts is None):
            raise ConfigError("--model-path and --prompts go together")
        if self.model_path and any(not d.startswith("engine_") for d in self.decoders):
            raise ConfigError("with --model-path the engine decoders run (B rows at a time over all prompts); "
                              "choose engine_*")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(DecodeBenchConfig, prog="scripts/bench_decode.py", description=__doc__,
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    assert torch.cuda.is_available(), "this benchmark needs a GPU"
    print(f"engine BLAS: {args.blas}")
    torch.manual_seed(0)
    if args.model_path:
        model, spec, pool = trained_subject(args.model_path, args.prompts, args.prompt_len)
    else:
        model, spec, pool = random_subject(args)
    label = args.model_path or args.size
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = copy_bandwidth()
    t_weights = weight_bytes / bandwidth
    specs = {f: ModelSpec(**{**spec.__dict__, "family": f}) for f in ("ar", "sdar", "wedlm")}
    print(f"{label}: {weight_bytes / 1e9:.1f} GB bf16, {torch.cuda.get_device_name()}, copy bandwidth "
          f"{bandwidth / 1e12:.2f} TB/s: one weight read {t_weights * 1e3:.2f} ms", flush=True)
    results = []
    counted: set[tuple[str, str]] = set()

    def record(name, bsz, secs, tokens, forwards, **extra):
        """``forwards``: the forwards a row took part in, summed over rows (= forwards x rows when every
        row decodes to the end): per token that is the rows' own rate, whatever their lengths."""
        per_token = forwards / tokens
        roofline = bsz / per_token / t_weights
        row = {"decoder": name, "batch": bsz, "seconds": secs, "tokens_per_s": tokens / secs,
               "forwards_per_token": per_token, "roofline_tokens_per_s": roofline,
               "roofline_fraction": tokens / secs / roofline, **extra}
        results.append(row)
        print(f"{name:34s} batch {bsz:3d}: {tokens / secs:9.1f} tok/s  {per_token:5.2f} fwd/tok  "
              f"{100 * row['roofline_fraction']:5.1f}% of {roofline:9.1f}  ({secs:.2f} s)", flush=True)

    for bsz in args.batch_sizes:
        prompts = pool(bsz)
        ids = None if args.model_path else torch.tensor(prompts, device="cuda")
        for cache in ("dynamic", "static"):
            if f"hf_{cache}" not in args.decoders:
                continue
            kw = {"cache_implementation": "static", "disable_compile": True} if cache == "static" else {}
            with torch.no_grad():
                model.generate(input_ids=ids[:, :16], max_new_tokens=4, do_sample=False, eos_token_id=None,
                               pad_token_id=0, **kw)
                out, secs = timed(lambda ids=ids, kw=kw: model.generate(
                    input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0, **kw))
            new = out.shape[1] - args.prompt_len
            record(f"AR   HF generate, {cache} cache", bsz, secs, bsz * new, bsz * new)
        runs = []   # (name, decoder factory, settings, engine?)
        for steps in args.steps:
            s = DecodeSettings(gen_length=args.new_tokens, temperature=0, block_length=args.block_length,
                               denoising_steps=steps)
            runs.append((f"SDAR b{args.block_length} s{steps} reference", "ref_sdar", SDARDecoder, "sdar", s))
            runs.append((f"SDAR b{args.block_length} s{steps} engine", "engine_sdar", None, "sdar", s))
        lm = DecodeSettings(gen_length=args.new_tokens, temperature=0, block_length=args.block_length,
                            denoising_steps=1, sdar_rules="lmdeploy")
        runs.append((f"SDAR b{args.block_length} s1 lmdeploy rules engine", "engine_sdar_lmdeploy", None, "sdar", lm))
        for tau in args.entropy_thresholds:
            s = DecodeSettings(gen_length=args.new_tokens, temperature=0, window_size=args.window,
                               entropy_threshold=tau)
            runs.append((f"WeDLM w{args.window} tau {tau:g} reference", "ref_wedlm", WeDLMDecoder, "wedlm", s))
            runs.append((f"WeDLM w{args.window} tau {tau:g} engine", "engine_wedlm", None, "wedlm", s))
        runs.append(("AR   engine", "engine_ar", None, "ar", DecodeSettings(gen_length=args.new_tokens,
                                                                             temperature=0)))
        # each engine run once per layer math (named by it when there are several); reference runs once
        runs = [(name if ref_cls or len(args.layers) == 1 else f"{name} [{m}]", key, ref_cls, family, s, m)
                for name, key, ref_cls, family, s in runs for m in ([None] if ref_cls else args.layers)]
        engines: dict[tuple[str, str], EngineDecoder] = {}
        for name, key, ref_cls, family, settings, layers in runs:
            if key not in args.decoders:
                continue
            if ref_cls is not None:
                dec = ref_cls(model, specs[family])
                dec.generate([x[:16] for x in prompts], DecodeSettings(**{**settings.__dict__, "gen_length": 8}))
                gens, secs = timed(lambda dec=dec, s=settings, prompts=prompts: dec.generate(prompts, s))
            else:
                # No prefix cache: the timed second run prefills its prompts whole, as the first did (with the
                # cache it would find them all, and meet prefill shapes the first run never captured).
                dec = engines.get((family, layers)) or EngineDecoder(
                    model, specs[family], max_rows=bsz, attention=args.attention, fused=layers == "fused",
                    blas=args.blas, prefix_cache_tokens=0)
                engines = {(family, layers): dec}   # one engine's cache at a time
                _, first = timed(lambda dec=dec, s=settings, prompts=prompts: dec.generate(prompts, s))
                if (family, layers) not in counted:
                    counted.add((family, layers))
                    n = kernels_per_forward(dec.engine, rows=1, queries=4)
                    print(f"  {family} engine, {layers} layers: {n} CUDA kernels per forward (1 row x 4 queries, "
                          f"{n / model.config.num_hidden_layers:.1f} per layer)", flush=True)
                before = dataclasses.replace(dec.engine.stats)
                gens, secs = timed(lambda dec=dec, s=settings, prompts=prompts: dec.generate(prompts, s))
            n_tok = sum(len(g.token_ids) for g in gens)
            fwd = sum(g.num_forwards for g in gens)
            record(name, bsz, secs, n_tok, fwd)
            if ref_cls is None:   # the same run without its prefill: decode steps only
                stats = dec.engine.stats
                decode_s = stats.decode_s - before.decode_s
                record(name + " (decode only)", bsz, decode_s, n_tok, fwd, graphs=dec.engine.forward.num_graphs,
                       first_run_s=first, prefill_s=stats.prefill_s - before.prefill_s)
        engines.clear()
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"size": args.size, "weight_bytes": weight_bytes, "prompt_len": args.prompt_len,
                               "new_tokens": args.new_tokens, "gpu": torch.cuda.get_device_name(),
                               "copy_bandwidth": bandwidth, "torch": torch.__version__, "results": results},
                              indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
