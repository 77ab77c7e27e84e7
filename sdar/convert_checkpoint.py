"""Turn a causal LM checkpoint (Qwen3, Qwen2, Llama, ...) into an SDAR block-diffusion or a WeDLM checkpoint.

Adds <|MASK|> to the tokenizer (and an embedding row if needed) and writes block_size and mask_token_id into
config.json: Qwen3 -> model_type "sdar" (loadable by lmdeploy's dllm backend); other architectures keep their
model type and get "diffusion": "sdar" (or "wedlm" with --family wedlm). --model-path also takes a pretrained
start's name (python -m textwm.models.pretrained --list).

    python sdar/convert_checkpoint.py --model-path runs/tiny_ar --output-dir runs/tiny_ar_as_sdar --block-size 4
    python sdar/convert_checkpoint.py --model-path smollm2-135m-instruct --output-dir runs/smollm2_wedlm \
        --family wedlm --block-size 32
"""

import sys
from dataclasses import dataclass

from textwm.config import ConfigCLI, option


@dataclass
class ConvertCheckpointConfig:
    model_path: str = option(help="causal LM checkpoint folder, hub id or pretrained start name")
    output_dir: str = option(help="where the converted checkpoint is written")
    block_size: int = option(4, "SDAR: block length the model will be trained with; WeDLM: its masking block")
    family: str = option("sdar", "what to convert to", choices=("sdar", "wedlm"))


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(ConvertCheckpointConfig, prog="sdar/convert_checkpoint.py", description=__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]

    from textwm.models.checkpoint import CheckpointError, convert_checkpoint

    try:
        out = convert_checkpoint(args.model_path, args.output_dir, block_size=args.block_size, family=args.family)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.family.upper() if args.family == 'sdar' else 'WeDLM'} checkpoint -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
