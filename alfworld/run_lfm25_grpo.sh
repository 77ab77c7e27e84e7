#!/usr/bin/env bash
# GRPO of LFM2.5-1.2B on ALFWorld in the world model, the paper's GETTING_STARTED single-GPU run.
# Hardware: 1 H100/H200 (bf16, vLLM colocate at 0.5, model and optimizer offloaded during rollouts).
# Runtime: most of a day for two epochs of 300 tasks x 8 generations x 30 turns.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_alfworld_lfm_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   MODEL_PATH=<SFT checkpoint> CUDA_VISIBLE_DEVICES=0 bash run_lfm25_grpo.sh
set -euo pipefail

export RUN_NAME="${RUN_NAME:-alfworld_lfm25_grpo}"
export STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|>}"
export LR="${LR:-2e-6}"
export EPOCHS="${EPOCHS:-2}"
export BETA="${BETA:-0.1}"
export OFFLOAD_MODEL="${OFFLOAD_MODEL:-true}"
export OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-true}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.5}"
export SAVE_STEPS="${SAVE_STEPS:-25}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
export DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-2}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_alfworld_lfm_grpo.sh" "$@"
