"""The AR + diffusion hybrid measured: an AR verifier's greedy answers drafted by an SDAR or WeDLM model of the
same tokenizer (:mod:`textwm.generation.speculative`), on held-out world-model rows, one row at a time.

Printed per draft length, and written to ``--out``: the share of answers equal to the AR model's own greedy ones
(must be 1), tokens per verifier forward, the share of drafted tokens kept, and the seconds of the hybrid against
the AR decoder alone and the drafter alone on the same rows (batch 1; the drafter's reference decoder decodes
each draft from the whole context, so the hybrid's wall time is an upper bound of what an engine's would be).

    python scripts/bench_speculative.py --verifier runs/anchor_study/ar/final --drafter runs/anchor_study/sdar/final \\
        --rows runs/anchor_study/data/alfworld_test.jsonl --limit 100 --draft-lengths 2 4 8 --device cuda
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from textwm.config import ConfigCLI, option  # noqa: E402  (after the path above)


@dataclass
class SpeculativeBenchConfig:
    verifier: str = option(help="the AR checkpoint")
    drafter: str = option(help="an SDAR or WeDLM checkpoint of the same tokenizer")
    rows: str = option(help="chat rows (.jsonl); the prompt is every message but the last")
    limit: int = option(100, "the first N rows")
    draft_lengths: list[int] = option(help="draft lengths measured", default_factory=lambda: [2, 4, 8])
    gen_length: int = option(256, "tokens per answer at most")
    block_length: int = option(4, "the SDAR drafter's block length")
    denoising_steps: int = option(4, "the SDAR drafter's steps per block")
    device: str = option("auto", "auto, cpu, cuda, ...")
    dtype: str = option("auto", "the models' dtype")
    engine: bool = option(False, "the engine's decoders (else the reference ones)")
    max_len: int = option(4096, "--engine: prompt + answer at most")
    out: str = option("", "write the figures here (JSON)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(SpeculativeBenchConfig, prog="scripts/bench_speculative.py",
                       description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]

    from textwm.data.chat_encoder import ChatEncoder
    from textwm.data.jsonl import read_jsonl, write_json
    from textwm.generation.decoders import reference_decoder
    from textwm.generation.engine import DecodeEngine
    from textwm.generation.engine.speculative import EngineSpeculativeDecoder
    from textwm.generation.settings import DecodeSettings
    from textwm.generation.speculative import SpeculativeDecoder
    from textwm.models.checkpoint import load_model

    verifier = load_model(args.verifier, device=args.device, dtype=args.dtype)
    drafter = load_model(args.drafter, device=args.device, dtype=args.dtype)
    encoder = ChatEncoder(verifier.tokenizer)
    rows = read_jsonl(args.rows).rows[:args.limit]
    prompts = [encoder.prompt_ids((json.loads(r["messages"]) if isinstance(r["messages"], str)
                                   else r["messages"])[:-1]) for r in rows]
    settings = DecodeSettings(temperature=0.0, gen_length=args.gen_length, block_length=args.block_length,
                              denoising_steps=args.denoising_steps)

    def timed(decoder) -> tuple[list, float]:
        started = time.perf_counter()
        out = [decoder.generate([prompt], settings)[0] for prompt in prompts]
        return out, time.perf_counter() - started

    def alone(lm):
        """One model decoding alone, batch 1: the engine (warmed up) or the reference decoder."""
        if not args.engine:
            return reference_decoder(lm.model, lm.spec)
        engine = DecodeEngine(lm.model, lm.spec, max_rows=1, max_len=args.max_len)
        if engine.net.device.type == "cuda":
            engine.warm_up(settings)
        return engine

    def hybrid(k):
        if not args.engine:
            return SpeculativeDecoder(verifier, drafter, draft_length=k)
        decoder = EngineSpeculativeDecoder(verifier, drafter, draft_length=k, max_len=args.max_len,
                                           block_length=args.block_length)
        if decoder.net.device.type == "cuda":
            decoder.warm_up(settings)
        return decoder

    ar_answers, ar_seconds = timed(alone(verifier))
    ar_tokens = sum(len(a.token_ids) + (a.finish_reason == "stop") for a in ar_answers)
    _, drafter_seconds = timed(alone(drafter))
    print(f"{'engine' if args.engine else 'reference decoders'}; {len(prompts)} prompts from {args.rows}; "
          f"AR alone {ar_seconds:.1f} s ({ar_tokens} tokens, {ar_tokens / ar_seconds:.1f} tok/s), "
          f"{drafter.spec.family} alone {drafter_seconds:.1f} s")
    print(f"{'draft':>5} {'equal':>6} {'tok/fwd':>7} {'kept':>6} {'seconds':>8} {'vs AR':>6}")
    results = []
    for k in args.draft_lengths:
        decoder = hybrid(k)
        answers, seconds = timed(decoder)
        equal = sum(a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
                    for a, b in zip(answers, ar_answers)) / max(1, len(prompts))
        s = decoder.stats
        row = {"draft_length": k, "equal_to_ar_greedy": equal, "tokens_per_verifier_forward":
               round(s.tokens_per_verifier_forward, 3), "acceptance": round(s.acceptance, 3), "seconds": round(seconds, 2),
               "verifier_forwards": s.verifier_forwards, "drafter_forwards": s.drafter_forwards,
               "generated": s.generated}
        results.append(row)
        print(f"{k:>5} {equal:>6.3f} {row['tokens_per_verifier_forward']:>7.2f} {row['acceptance']:>6.3f} "
              f"{seconds:>8.1f} {ar_seconds / seconds:>5.2f}x", flush=True)
    if args.out:
        write_json(args.out, {"settings": vars(args), "prompts": len(prompts), "ar_seconds": round(ar_seconds, 2),
                              "ar_tokens": ar_tokens, "engine": args.engine, "drafter_family": drafter.spec.family,
                              "drafter_seconds": round(drafter_seconds, 2), "results": results})
        print(f"wrote {args.out}")
    return 0 if all(r["equal_to_ar_greedy"] == 1 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
