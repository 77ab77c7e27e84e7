#!/usr/bin/env bash
# GRPO of LFM2.5-1.2B on ALFWorld in the world model, under the paper's name (its README_alfworld.md run).
# Hardware: 1 H100/H200 (bf16, vLLM colocate at 0.4).
# Runtime: several hours for one epoch of 300 tasks x 8 generations x 30 turns.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_alfworld_lfm_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   MODEL_PATH=<SFT checkpoint> CUDA_VISIBLE_DEVICES=0 bash run_lfm25_alfworld_grpo.sh
set -euo pipefail

# The paper's values are run_alfworld_lfm_grpo.sh's defaults already.
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_alfworld_lfm_grpo.sh" "$@"
