r"""Batched generation for WeDLM world models: streaming parallel decoding under causal attention.

Same settings and output rows as sdar/eval_generate.py (the decoder follows the checkpoint: WeDLM,
SDAR or AR), with the defaults of the paper's wedlm/eval_generate.py, whose flags are aliases here:
--max-output-tokens (= --gen-length, 8192), --batch-size (= --per-batch, 32), --wedlm-window-size
(= --window-size, 16), --wedlm-entropy-threshold (= --entropy-threshold, 0.6),
--wedlm-pos-penalty-factor (= --position-penalty, 0.02), --temperature 0 (greedy) and
--max-model-len 16384: a prompt of more than max_model_len - max_output_tokens - 64 tokens is not
generated, its row reads SKIPPED_OVERLONG with skipped_overlong: true (every row carries that key).
Prompts are not cut (--prompt-truncate none); a failed batch is retried row by row.
--gpu-memory-utilization (a WeDLM engine knob) is accepted and ignored with a notice.

Tiny CPU run:
    python wedlm/eval_generate.py --model-path runs/tiny_wedlm_sft --data-dir data/samples \
        --file-pattern 'sciworld_wm_{name}.jsonl' --datasets test --output-dir runs/gen_wedlm \
        --num-gpus 0 --max-output-tokens 32
The paper's command (README.md, wedlm/README.md), one GPU:
    python wedlm/eval_generate.py --model-path ./outputs/my-run/final \
        --data-dir ./data --datasets eval --output-dir ./outputs/eval_results
"""

from textwm.generation.cli import GPU_MEMORY_UTILIZATION, main
from textwm.generation.runner import WeDLMEvalGenerateConfig

if __name__ == "__main__":
    raise SystemExit(main(prog="wedlm/eval_generate.py", description=__doc__, config_cls=WeDLMEvalGenerateConfig,
                          noop_flags=(GPU_MEMORY_UTILIZATION,)))
