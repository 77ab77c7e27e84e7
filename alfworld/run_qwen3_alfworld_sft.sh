#!/usr/bin/env bash
# SFT of Qwen3-4B on ALFWorld expert demos (swift sft, full parameters), the paper's README_alfworld.md run.
# DATA: as run_lfm25_alfworld_sft.sh. The paper's template was qwen3; ours for this non-thinking
# Instruct-2507 model is qwen3_nothinking, as in our other Qwen3 launchers (TEMPLATE=qwen3 for the paper's).
# Hardware: 1 H100/H200 in bf16.
# Runtime: about an hour for 1,500 demos x 1 epoch.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# scripts/lib/agent_sft.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_qwen3_alfworld_sft.sh
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
export TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
export RUN_NAME="${RUN_NAME:-alfworld_qwen3_sft}"
export MAX_LENGTH="${MAX_LENGTH:-8192}"
export EPOCHS="${EPOCHS:-1}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
export LR="${LR:-2e-6}"
export WARMUP_RATIO="${WARMUP_RATIO:-0.1}"
export SAVE_STEPS="${SAVE_STEPS:-50}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
export PAPER_DATA="${PAPER_DATA:-alfworld_sft_large.jsonl alfworld_sft.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=alfworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
