"""Build a tiny random world model (Qwen3 or Llama architecture) with a tokenizer trained on chat data.

    python scripts/make_tiny_model.py --family sdar --out runs/tiny_sdar            # ~1 s
    python scripts/make_tiny_model.py --family ar --size small --out runs/small_ar
    python scripts/make_tiny_model.py --family sdar_moe --out runs/tiny_sdar_moe     # Qwen3-MoE + SDAR fields
    python scripts/make_tiny_model.py --family sdar --arch llama --out runs/tiny_llama_sdar   # SmolLM2's architecture
    python scripts/make_tiny_model.py --family sdar --size qwen3-0.6b --embedding-rows 65536 --out runs/sdar_0p5b
    python scripts/make_tiny_model.py --family sdar --size qwen3-0.6b --embedding-rows 151936 \
        --mask-token-id 151669 --out runs/sdar_lmdeploy     # servable by lmdeploy (its hard-coded mask id)
"""

import argparse
import logging
from pathlib import Path

from textwm.data.jsonl import read_jsonl
from textwm.data.schema import validate_row
from textwm.models.tiny import SIZES, TINY_ARCHS, TINY_FAMILIES, build_tiny_checkpoint, chat_texts

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "sciworld_wm_train.jsonl"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--family", choices=TINY_FAMILIES, default="sdar")
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--arch", choices=TINY_ARCHS, default="qwen3",
                   help="model architecture: qwen3, or llama (SmolLM2's; no sdar_moe family)")
    p.add_argument("--block-size", type=int, default=4, help="SDAR block size; WeDLM masking block")
    p.add_argument("--texts", nargs="+", default=[str(SAMPLE)],
                   help="chat JSONL files to train the tokenizer on")
    p.add_argument("--vocab-size", type=int, default=2048, help="BPE vocabulary (upper bound)")
    p.add_argument("--embedding-rows", type=int, default=None,
                   help="pad the embedding to this many rows (a real model's parameter count)")
    p.add_argument("--mask-token-id", type=int, default=None,
                   help="mask at this embedding row (past the tokenizer's vocabulary) instead of the tokenizer's "
                        "<|MASK|>; lmdeploy needs 151669 (with --embedding-rows 151936)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.arch == "llama" and args.family == "sdar_moe":
        p.error("--family sdar_moe is Qwen3-MoE only; use --arch qwen3, or --family sdar for a Llama SDAR model")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    rows = [r for path in args.texts for r in read_jsonl(path, validate=validate_row).rows]
    build_tiny_checkpoint(args.out, chat_texts(rows), family=args.family, size=args.size, block_size=args.block_size,
                          vocab_size=args.vocab_size, seed=args.seed, embedding_rows=args.embedding_rows,
                          mask_token_id=args.mask_token_id, arch=args.arch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
