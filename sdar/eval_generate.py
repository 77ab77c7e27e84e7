"""Batched generation for world-model checkpoints, SDAR (block diffusion + KV cache) or AR.

The decoder is chosen from the checkpoint (model_type "sdar" -> block diffusion, else left to
right), so one script generates for both families. Reads <data-dir>/eval_<name>.jsonl chat rows
(last message = reference), writes <output-dir>/<name>_outputs.jsonl; score them with evaluate.py.

Tiny CPU run:
    python scripts/make_tiny_model.py --family sdar --out runs/tiny_sdar
    python sdar/eval_generate.py --model-path runs/tiny_sdar --data-dir data/samples \
        --file-pattern 'sciworld_wm_{name}.jsonl' --datasets test --output-dir runs/gen \
        --num-gpus 0 --gen-length 32 --temperature 0
8 GPUs:
    python sdar/eval_generate.py --model-path outputs/sdar_sft --data-dir data --datasets test \
        --output-dir outputs/eval_results --num-gpus 8 --per-batch 16
"""

from textwm.generation.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="sdar/eval_generate.py", description=__doc__))
