#!/usr/bin/env bash
# GRPO of Mistral-7B on ALFWorld in the world model, under the paper's name (it ran on 4 GPUs).
# Hardware: 4 H100/H200 (torchrun, DeepSpeed ZeRO-2, bf16, vLLM colocate at 0.3).
# Runtime: several hours for one epoch of 300 tasks x 8 generations x 30 turns.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_alfworld_mistral_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   MODEL_PATH=<SFT checkpoint> CUDA_VISIBLE_DEVICES=0,1,2,3 bash run_mistral_grpo_2gpus.sh
set -euo pipefail

# The paper's values are run_alfworld_mistral_grpo.sh's defaults already.
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_alfworld_mistral_grpo.sh" "$@"
