#!/usr/bin/env bash
# SFT of LFM2.5-1.2B on ALFWorld expert demos (swift sft, full parameters), the paper's README_alfworld.md run.
# DATA: sft_train.jsonl of alfworld/build_wm_dataset.py or alfworld/build_sft_expert.py, or the paper's file.
# Hardware: 1 H100/H200 in bf16.
# Runtime: well under an hour for 1,500 demos x 1 epoch.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# scripts/lib/agent_sft.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_lfm25_alfworld_sft.sh
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-LiquidAI/LFM2.5-1.2B-Instruct}"
export TEMPLATE="${TEMPLATE:-chatml}"
export RUN_NAME="${RUN_NAME:-alfworld_lfm25_sft}"
export MAX_LENGTH="${MAX_LENGTH:-8192}"
export EPOCHS="${EPOCHS:-1}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-2}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
export LR="${LR:-2e-5}"
export WARMUP_RATIO="${WARMUP_RATIO:-0.1}"
export SAVE_STEPS="${SAVE_STEPS:-50}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
export PAPER_DATA="${PAPER_DATA:-alfworld_sft_large.jsonl alfworld_sft.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=alfworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
