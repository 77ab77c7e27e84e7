"""Turn a Qwen3/Qwen2 causal LM checkpoint into an SDAR block-diffusion checkpoint.

Adds <|MASK|> to the tokenizer (and an embedding row if needed) and writes block_size and
mask_token_id into config.json (Qwen3 -> model_type "sdar", loadable by lmdeploy's dllm backend).
    python sdar/convert_checkpoint.py --model-path runs/tiny_ar --output-dir runs/tiny_ar_as_sdar --block-size 4
"""

import argparse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True, help="causal LM checkpoint folder (or hub id)")
    p.add_argument("--output-dir", required=True, help="where the SDAR checkpoint is written")
    p.add_argument("--block-size", type=int, default=4, help="block length the model will be trained with")
    args = p.parse_args()

    from textwm.models.checkpoint import convert_checkpoint

    out = convert_checkpoint(args.model_path, args.output_dir, block_size=args.block_size)
    print(f"SDAR checkpoint -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
