"""What the SDAR decoding rules cost and give on one checkpoint: the same WM prompts under several settings.

The paper scored its SDAR world models with JetAstra/SDAR `generate.py` rules and served them with lmdeploy
(`--dllm-block-length 8 --dllm-denoising-steps 1`), whose rules differ (sdar/README.md, "Decoding: generate.py
rules vs lmdeploy rules"). For each setting this prints the forwards a block and a generated token, the exact
match and ROUGE-L against the rows' references (normalised as the scorer does) and the share of outputs identical
to the first setting's. Greedy. Tiny CPU run (after the demo):

    python scripts/compare_sdar_rules.py --model-path runs/demo/wm_sdar --data runs/demo/data/wm_test.jsonl --rows 40

A setting is `name:rules:block_length:denoising_steps[:strategy]`; the default set: the eval harness default,
one forward a block (generate rules at 1 step), the paper's server flags under lmdeploy rules, and block 4 there.
"""

import dataclasses
import time
from dataclasses import dataclass

from textwm.config import ConfigCLI, option
from textwm.data.chat_encoder import ChatEncoder
from textwm.data.jsonl import read_jsonl
from textwm.data.schema import plain_messages, split_prompt_target, validate_target_row
from textwm.data.text import normalize
from textwm.generation.decoders import make_decoder
from textwm.generation.settings import DecodeSettings
from textwm.metrics.overlap import rouge_l_f1
from textwm.models.checkpoint import load_model

DEFAULT_SETTINGS = ("generate_b4_s4:generate:4:4", "generate_b4_s1:generate:4:1", "lmdeploy_b8_s1:lmdeploy:8:1",
                    "lmdeploy_b4_s1:lmdeploy:4:1")


def parse_setting(text: str, base: DecodeSettings) -> tuple[str, DecodeSettings]:
    parts = text.split(":")
    if len(parts) not in (4, 5):
        raise SystemExit(f"error: --settings {text!r}: expected name:rules:block_length:denoising_steps[:strategy]")
    name, rules, block, steps, *strategy = parts
    extra = {"remasking_strategy": strategy[0]} if strategy else {}
    return name, dataclasses.replace(base, sdar_rules=rules, block_length=int(block), denoising_steps=int(steps),
                                     **extra)


@dataclass
class SdarRulesConfig:
    model_path: str = option(help="an SDAR checkpoint")
    data: str = option(help="chat rows whose last message is the target (a wm_test.jsonl)")
    rows: int = option(40, "the first N rows")
    gen_length: int = option(128, "tokens per answer at most")
    per_batch: int = option(8, "prompts decoded together")
    settings: list[str] = option(help="decodings compared, NAME:RULES:BLOCK:STEPS[:STRATEGY]",
                                 default_factory=lambda: list(DEFAULT_SETTINGS))
    device: str = option("auto", "auto, cpu, cuda, ...")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(SdarRulesConfig, prog="scripts/compare_sdar_rules.py", description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]

    lm = load_model(args.model_path, device=args.device)
    encoder, decoder = ChatEncoder(lm.tokenizer), make_decoder(lm.model, lm.spec)
    rows = read_jsonl(args.data, validate=validate_target_row).rows[:args.rows]
    prompts, refs = zip(*(split_prompt_target(r) for r in rows))
    ids = [encoder.prompt_ids(plain_messages(m)) for m in prompts]
    base = DecodeSettings(gen_length=args.gen_length, temperature=0)
    first: list[str] | None = None
    print(f"{args.model_path} (block_size {lm.spec.block_size}), {len(ids)} rows of {args.data}, "
          f"max {args.gen_length} new tokens, greedy")
    print(f"{'setting':<18} {'fwd/block':>9} {'fwd/token':>9} {'tokens':>7} {'EM':>6} {'ROUGE-L':>8} "
          f"{'same as 1st':>11} {'s':>6}")
    for text in args.settings:
        name, settings = parse_setting(text, base)
        started = time.perf_counter()
        gens = [g for i in range(0, len(ids), args.per_batch)
                for g in decoder.generate(ids[i:i + args.per_batch], settings)]
        seconds = time.perf_counter() - started
        outs = [normalize(lm.tokenizer.decode(g.token_ids, skip_special_tokens=True)) for g in gens]
        tokens = sum(len(g.token_ids) + (g.finish_reason == "stop") for g in gens)
        forwards = sum(g.num_forwards for g in gens)
        blocks = sum(-(-(len(p) + len(g.token_ids) + 1) // settings.block_length) - len(p) // settings.block_length
                     for p, g in zip(ids, gens))
        em = sum(o == normalize(r) for o, r in zip(outs, refs)) / len(outs)
        rouge = sum(rouge_l_f1(o, normalize(r)) for o, r in zip(outs, refs)) / len(outs)
        first = first or outs
        same = sum(a == b for a, b in zip(outs, first)) / len(outs)
        print(f"{name:<18} {forwards / max(blocks, 1):>9.2f} {forwards / max(tokens, 1):>9.3f} {tokens:>7} "
              f"{em:>6.3f} {rouge:>8.3f} {same:>11.3f} {seconds:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
