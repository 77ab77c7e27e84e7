#!/usr/bin/env bash
# SFT of Qwen3-4B on ALFWorld expert demos, the paper's GETTING_STARTED run (3 epochs, 16k tokens).
# DATA: as run_lfm25_sft.sh. Template: qwen3_nothinking (the paper's: qwen3), as run_qwen3_alfworld_sft.sh.
# Hardware: 1 H100/H200 in bf16.
# Runtime: a few hours for 1,500 demos x 3 epochs.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# scripts/lib/agent_sft.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_qwen3_sft.sh
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
export TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
export RUN_NAME="${RUN_NAME:-alfworld_qwen3_sft}"
export MAX_LENGTH="${MAX_LENGTH:-16384}"
export EPOCHS="${EPOCHS:-3}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-8}"
export LR="${LR:-2e-6}"
export WARMUP_RATIO="${WARMUP_RATIO:-0.05}"
export SAVE_STEPS="${SAVE_STEPS:-100}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
export LOGGING_STEPS="${LOGGING_STEPS:-5}"
export PAPER_DATA="${PAPER_DATA:-alfworld_sft.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=alfworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
