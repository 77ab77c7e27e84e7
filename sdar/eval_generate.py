r"""Batched generation for world-model checkpoints, SDAR (block diffusion + KV cache) or AR.

The decoder is chosen from the checkpoint (model_type "sdar" -> block diffusion, else left to
right), so one script generates for both families. Reads <data-dir>/eval_<name>.jsonl chat rows
(last message = reference), writes <output-dir>/<name>_outputs.jsonl with the paper's rows
{index, config, prediction_raw, reference, generated, ground_truth}; score them with evaluate.py.

Every flag of the paper's sdar/eval_generate.py works with the same meaning and default (except
--num-gpus: 1 here, 8 there); its --sdar-dir is accepted and ignored with a notice (no SDAR clone
is needed). --max-model-len (off by default) skips overlong prompts as wedlm/eval_generate.py does.

Tiny CPU run:
    python scripts/make_tiny_model.py --family sdar --out runs/tiny_sdar
    python sdar/eval_generate.py --model-path runs/tiny_sdar --data-dir data/samples \
        --file-pattern 'sciworld_wm_{name}.jsonl' --datasets test --output-dir runs/gen \
        --num-gpus 0 --gen-length 32 --temperature 0
The paper's command (README.md, sdar/README.md), 8 GPUs:
    python sdar/eval_generate.py --sdar-dir ./SDAR --model-path ./outputs/checkpoint-N \
        --data-dir ./data --datasets eval --output-dir ./outputs/eval_results --num-gpus 8
"""

from textwm.generation.cli import SDAR_DIR, main

if __name__ == "__main__":
    raise SystemExit(main(prog="sdar/eval_generate.py", description=__doc__, noop_flags=(SDAR_DIR,)))
