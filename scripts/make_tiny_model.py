"""Build a tiny random world model (Qwen3 or Llama architecture) with a tokenizer trained on chat data.

    python scripts/make_tiny_model.py --family sdar --out runs/tiny_sdar            # ~1 s
    python scripts/make_tiny_model.py --family ar --size small --out runs/small_ar
    python scripts/make_tiny_model.py --family sdar_moe --out runs/tiny_sdar_moe     # Qwen3-MoE + SDAR fields
    python scripts/make_tiny_model.py --family sdar --arch llama --out runs/tiny_llama_sdar   # SmolLM2's architecture
    python scripts/make_tiny_model.py --family sdar --size qwen3-0.6b --embedding-rows 65536 --out runs/sdar_0p5b
    python scripts/make_tiny_model.py --family sdar --size qwen3-0.6b --embedding-rows 151936 \
        --mask-token-id 151669 --out runs/sdar_lmdeploy     # servable by lmdeploy (its hard-coded mask id)
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.jsonl import read_jsonl
from textwm.data.schema import validate_row
from textwm.models.tiny import (
    MOE_VARIANTS,
    SIZES,
    TINY_ARCHS,
    TINY_FAMILIES,
    build_tiny_checkpoint,
    chat_texts,
)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "sciworld_wm_train.jsonl"


@dataclass
class TinyModelConfig:
    out: str = option(help="checkpoint folder to write")
    family: str = option("sdar", "the world-model family", choices=TINY_FAMILIES)
    size: str = option("tiny", "the model's shape", choices=sorted(SIZES))
    arch: str = option("qwen3", "model architecture: qwen3, or llama (SmolLM2's; no sdar_moe family)",
                       choices=TINY_ARCHS)
    block_size: int = option(4, "SDAR block size; WeDLM masking block")
    texts: list[str] = option(help="chat JSONL files to train the tokenizer on", default_factory=lambda: [str(SAMPLE)])
    vocab_size: int = option(2048, "BPE vocabulary (upper bound)")
    embedding_rows: int | None = option(None, "pad the embedding to this many rows (a real model's parameter count)")
    mask_token_id: int | None = option(None, "mask at this embedding row (past the tokenizer's vocabulary) instead of "
                                             "the tokenizer's <|MASK|>; lmdeploy needs 151669 (with --embedding-rows "
                                             "151936)")
    seed: int = option(0, "seed of the weights")

    def __post_init__(self) -> None:
        if self.arch == "llama" and self.family in MOE_VARIANTS:
            raise ConfigError("--family sdar_moe is Qwen3-MoE only; use --arch qwen3, or --family sdar for a Llama "
                              "SDAR model")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(TinyModelConfig, prog="scripts/make_tiny_model.py", description=__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    rows = [r for path in args.texts for r in read_jsonl(path, validate=validate_row).rows]
    build_tiny_checkpoint(args.out, chat_texts(rows), family=args.family, size=args.size, block_size=args.block_size,
                          vocab_size=args.vocab_size, seed=args.seed, embedding_rows=args.embedding_rows,
                          mask_token_id=args.mask_token_id, arch=args.arch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
