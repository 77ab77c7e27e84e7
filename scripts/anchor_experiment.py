"""Anchored answers measured: how well a world model fills the unknown spans of held-out observations.

For every held-out transition (chat rows whose last message is the reference observation), a share of the
reference's tokens is given as anchors and the model fills the rest (:mod:`textwm.generation.anchors`):

* ``--densities``: the anchored share of the reference's tokens (0: no anchor, one slot for the whole answer);
* ``--placements``: where the anchors sit: ``prefix`` (the first tokens, what an AR model can also be given),
  ``suffix`` (the last ones), ``middle`` (one span in the middle), ``spread`` (every other span of a few tokens:
  fixed text on both sides of each slot), and ``structured`` (``--env``'s own frames, the text its responder
  knows around what it leaves to the world model: ``EnvSpec.observed_frame``; its density is what the frame
  holds, the transitions those of a frame's shape; ``structured_none`` is the same transitions unanchored, its
  baseline).

Each slot is as wide as the reference's span it replaces plus ``--slack`` tokens (the model ends a slot early by
a stop id). Printed and written (``--out``) per density and placement: exact match of the whole answer, of the
free spans (each slot's text against the reference's), anchor violations (a fixed string not where the
template put it: must be 0), forwards per generated token. Greedy unless ``--temperature``. ``--decoder``:
the static engine (``auto`` where it runs the architecture) or the family's reference decoder; greedy, the two
give the same answers.

    python scripts/anchor_experiment.py --model-path runs/sdar_sft/final --rows data/samples/sciworld_wm_test.jsonl \\
        --env sciworld --limit 1000 --out runs/anchors/sdar.json

One checkpoint per run (its family picks the decoder: SDAR, WeDLM or AR); compare families by running each.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from textwm.config import ConfigCLI, ConfigError, option  # noqa: E402  (after the path above)

PLACEMENTS = ("prefix", "middle", "suffix", "spread")
#: The env's own frames (``EnvSpec.observed_frame``): one condition, whatever the densities.
STRUCTURED = "structured"
#: The structured placement's transitions without an anchor: the baseline its figures compare with.
STRUCTURED_NONE = "structured_none"


def anchor_mask(n: int, density: float, placement: str, span: int = 4) -> list[bool]:
    """Which of ``n`` reference tokens are anchors (True) for ``density`` and ``placement``."""
    k = round(density * n)
    if k <= 0:
        return [False] * n
    if k >= n:
        k = n - 1                              # at least one token to fill
    if placement == "prefix":
        return [i < k for i in range(n)]
    if placement == "suffix":
        return [i >= n - k for i in range(n)]
    if placement == "middle":
        start = (n - k) // 2
        return [start <= i < start + k for i in range(n)]
    # spread: anchored spans of ``span`` tokens between free ones, their share about ``density``
    free = max(1, round(span * (1 - density) / density))
    mask = [(i % (span + free)) < span for i in range(n)]
    if all(mask):
        mask[-1] = False
    return mask


def template_of(tokens: list[int], mask: list[bool], decode, slack: int) -> tuple[list, list[str]]:
    """The response template (fixed strings, slots) of a reference and the reference texts of its slots."""
    parts, truths = [], []
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and mask[j] == mask[i]:
            j += 1
        text = decode(tokens[i:j])
        if mask[i]:
            if text:
                parts.append(text)
        else:
            parts.append({"fill": j - i + slack})
            truths.append(text)
        i = j
    return parts, truths


def in_order(text: str, template) -> bool:
    """``text`` is the template's fixed strings, in order, with any text where its slots are (the first fixed string
    at the start, the last at the end when the template ends with one)."""
    pattern = "".join(re.escape(p) if isinstance(p, str) else "(.*?)" for p in template.parts)
    return re.fullmatch(pattern, text, flags=re.DOTALL) is not None


def words_first_frame(frame: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    """An env frame as the simulator sends it: whitespace that ends a fixed part before a slot belongs to the slot
    (``textwm.generation.anchors.words_first``)."""
    out = []
    carry = ""
    for i, (is_slot, text) in enumerate(frame):
        if is_slot:
            out.append((True, carry + text))
            carry = ""
        elif i + 1 < len(frame) and frame[i + 1][0]:
            trimmed = text.rstrip()
            carry = text[len(trimmed):]
            if trimmed:
                out.append((False, trimmed))
        else:
            out.append((False, text))
    return out


def structured_template(frame: list[tuple[bool, str]], encode, slack: int) -> tuple[list, list[str], float]:
    """An env frame's template (each slot as wide as its text's tokens plus ``slack``), the slots' reference texts,
    and the share of the reference's tokens the frame's fixed text holds."""
    parts, truths, fixed, total = [], [], 0, 0
    for is_slot, text in words_first_frame(frame):
        n = len(encode(text))
        total += n
        if is_slot:
            parts.append({"fill": max(1, n + slack)})
            truths.append(text)
        else:
            parts.append(text)
            fixed += n
    return parts, truths, fixed / max(1, total)


def make_decoder(loaded, choice: str, batch_size: int):
    """The static engine or the family's reference decoder (``auto``: the engine where it runs the model)."""
    from textwm.generation.decoders import reference_decoder
    from textwm.generation.engine.decoder import EngineDecoder
    from textwm.generation.engine.static_model import UnsupportedModel

    pad = loaded.tokenizer.pad_token_id
    if choice != "reference":
        try:
            return EngineDecoder(loaded.model, loaded.spec, pad_token_id=pad, max_rows=batch_size), "engine"
        except UnsupportedModel as exc:
            if choice == "engine":
                raise
            print(f"the engine does not run this model ({exc}); the reference decoder decodes")
    return reference_decoder(loaded.model, loaded.spec, pad_token_id=pad), "reference"


@dataclass
class AnchorExperimentConfig:
    model_path: str = option(help="the checkpoint decoded")
    rows: str = option(help="chat rows (.jsonl); the last message is the reference")
    env: str = option("", "the rows' env: its frames are the structured placement")
    limit: int = option(1000, "the first N rows")
    densities: list[float] = option(help="shares of the reference given as anchors, each in [0, 1)",
                                    default_factory=lambda: [0.0, 0.25, 0.5, 0.75])
    placements: list[str] = option(help="default: prefix middle suffix, and structured with --env",
                                   default_factory=list, choices=(*PLACEMENTS, STRUCTURED))
    slack: int = option(0, "tokens a slot may take beyond its reference span")
    batch_size: int = option(16, "rows decoded together")
    decoder: str = option("auto", "the engine, the reference decoder, or the engine where it runs the model",
                          choices=("auto", "engine", "reference"))
    temperature: float = option(0.0, "sampling temperature (0: greedy)")
    block_length: int = option(4, "SDAR block length")
    denoising_steps: int = option(4, "SDAR denoising steps per block")
    device: str = option("auto", "auto, cpu, cuda, ...")
    dtype: str = option("auto", "the model's dtype (load_model's: auto, bfloat16, float32, ...)")
    out: str = option("", "write the figures here (JSON)")

    def __post_init__(self) -> None:
        if STRUCTURED in self.placements and not self.env:
            raise ConfigError("--placements structured: name the rows' env (--env)")
        for d in self.densities:
            if not 0 <= d < 1:
                raise ConfigError(f"each in [0, 1), got {d}", key="--densities")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(AnchorExperimentConfig, prog="scripts/anchor_experiment.py",
                       description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]

    from textwm.data.chat_encoder import ChatEncoder
    from textwm.data.jsonl import read_jsonl, write_json
    from textwm.generation.anchors import lay_out, parse_template
    from textwm.generation.settings import DecodeSettings
    from textwm.models.checkpoint import load_model

    placements = args.placements or ["prefix", "middle", "suffix", *([STRUCTURED] if args.env else [])]
    spec = None
    if args.env:
        from textwm.envs.registry import get_env
        spec = get_env(args.env)
    loaded = load_model(args.model_path, device=args.device, dtype=args.dtype)
    tok, encoder = loaded.tokenizer, ChatEncoder(loaded.tokenizer)
    decoder, decoder_name = make_decoder(loaded, args.decoder, args.batch_size)
    rows = read_jsonl(args.rows).rows[:args.limit]
    cases = []
    for row in rows:
        prompt = encoder.prompt_ids(row["messages"][:-1])
        reference = row["messages"][-1]["content"]
        cases.append((prompt, reference, encoder.encode_ids(reference)))
    settings = DecodeSettings(temperature=args.temperature, block_length=args.block_length,
                              denoising_steps=args.denoising_steps, seed=0)
    conditions = [(0.0, "none")] if 0.0 in args.densities else []
    conditions += [(d, pl) for d in args.densities if d > 0 for pl in placements if pl != STRUCTURED]
    conditions += [(0.0, STRUCTURED_NONE), (None, STRUCTURED)] if STRUCTURED in placements else []
    results = []
    print(f"{loaded.spec.family} {args.model_path} ({decoder_name}): {len(cases)} transitions from {args.rows}")
    print(f"{'density':>7} {'placement':>10} {'rows':>5} {'exact':>6} {'free exact':>10} {'violations':>10} "
          f"{'fwd/tok':>7}")
    for density, placement in conditions:
        prompts, templates, truths, layouts, references, shares = [], [], [], [], [], []
        for prompt, reference, ids in cases:
            frame = spec.observed_frame(reference) if placement in (STRUCTURED, STRUCTURED_NONE) else None
            if placement in (STRUCTURED, STRUCTURED_NONE) and frame is None:
                continue
            if placement == STRUCTURED:
                raw, truth, share = structured_template(frame, encoder.encode_ids, args.slack)
            else:
                mask = anchor_mask(len(ids), density, "prefix" if placement == STRUCTURED_NONE else placement)
                raw, truth = template_of(ids, mask, tok.decode, args.slack)
                share = density
            budget = sum(x["fill"] for x in raw if isinstance(x, dict))
            template = parse_template(raw, max_tokens=budget)
            prompts.append(prompt)
            templates.append(template)
            truths.append(truth)
            layouts.append(lay_out(template, encoder.encode_ids, budget))
            references.append(reference)
            shares.append(share)
        if not prompts:
            print(f"{'-':>7} {placement:>10}     0 (no transition of a frame's shape)")
            continue
        started = time.perf_counter()
        chunk = len(prompts) if decoder_name == "engine" else args.batch_size
        answers = []
        for b in range(0, len(prompts), chunk):
            answers += decoder.generate_anchored(prompts[b:b + chunk], layouts[b:b + chunk], settings, tok.decode)
        exact = free_exact = free_total = violations = forwards = generated = 0
        for reference, template, truth, answer in zip(references, templates, truths, answers):
            exact += answer.text.strip() == reference.strip()
            filled = [tok.decode(s) for s in answer.slot_token_ids]
            free_exact += sum(f == t for f, t in zip(filled, truth))
            free_total += len(truth)
            violations += not in_order(answer.text, template)
            forwards += answer.num_forwards
            generated += answer.completion_tokens
        n = len(prompts)
        density_out = round(sum(shares) / n, 4)
        row = {"density": density_out, "placement": placement, "transitions": n,
               "exact_match": round(exact / n, 4), "free_span_exact": round(free_exact / max(1, free_total), 4),
               "anchor_violations": violations, "forwards_per_token": round(forwards / max(1, generated), 3),
               "seconds": round(time.perf_counter() - started, 1)}
        results.append(row)
        print(f"{density_out:>7.2f} {placement:>10} {n:>5} {row['exact_match']:>6.3f} {row['free_span_exact']:>10.3f} "
              f"{violations:>10} {row['forwards_per_token']:>7.2f}", flush=True)
    if args.out:
        write_json(args.out, {"model_path": args.model_path, "family": loaded.spec.family, "rows": args.rows,
                              "decoder": decoder_name, "settings": vars(args), "results": results})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
