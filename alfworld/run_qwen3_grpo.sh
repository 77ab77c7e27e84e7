#!/usr/bin/env bash
# GRPO of Qwen3-4B on ALFWorld in the world model, the paper's GETTING_STARTED single-GPU run.
# Hardware: 1 H100/H200 (one process, no DeepSpeed, bf16, vLLM colocate at 0.3, model and optimizer offloaded).
# Runtime: most of a day for two epochs of 300 tasks x 8 generations x 30 turns.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_alfworld_qwen3_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   MODEL_PATH=<SFT checkpoint> CUDA_VISIBLE_DEVICES=0 bash run_qwen3_grpo.sh
set -euo pipefail

# One process whatever CUDA_VISIBLE_DEVICES holds, as the paper's script (no NPROC_PER_NODE).
export NUM_GPUS="${NUM_GPUS:-1}"
export DEEPSPEED="${DEEPSPEED-}"   # set and empty: no DeepSpeed
export RUN_NAME="${RUN_NAME:-alfworld_qwen3_grpo_1gpu}"
export LR="${LR:-1e-6}"
export EPOCHS="${EPOCHS:-2}"
export OFFLOAD_MODEL="${OFFLOAD_MODEL:-true}"
export OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-true}"
export SAVE_STEPS="${SAVE_STEPS:-25}"
export DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-2}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_alfworld_qwen3_grpo.sh" "$@"
