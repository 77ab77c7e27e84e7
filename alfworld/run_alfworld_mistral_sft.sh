#!/usr/bin/env bash
# SFT of Mistral-7B on ALFWorld expert demos (swift sft, full parameters), the warm start of the
# paper's Mistral GRPO run (run_alfworld_mistral_grpo.sh).
# DATA: sft_train.jsonl of alfworld/build_wm_dataset.py (the handcoded expert's winning episodes,
# "Action: <command>" turns) or alfworld/build_sft_expert.py.
# Hardware: 1 H100/H200 in bf16; NUM_GPUS=0: CPU in float32, tiny models only.
# Runtime: about an hour for 1,200 demos x 3 epochs on 1 GPU.
#
# This file holds the model's defaults only; every other knob and the swift line are in
# scripts/lib/agent_sft.sh. Every knob is an environment variable; extra arguments are appended:
#
#   DATA=runs/alfworld_data/sft_train.jsonl bash alfworld/run_alfworld_mistral_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-mistralai/Mistral-7B-Instruct-v0.3}"
export TEMPLATE="${TEMPLATE:-llama}"
export RUN_NAME="${RUN_NAME:-alfworld_mistral_sft}"
export MAX_LENGTH="${MAX_LENGTH:-8192}"
export EPOCHS="${EPOCHS:-3}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
export LR="${LR:-2e-6}"
export WARMUP_RATIO="${WARMUP_RATIO:-0.1}"
export MAX_GRAD_NORM="${MAX_GRAD_NORM:-1.0}"
export SAVE_STEPS="${SAVE_STEPS:-25}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
export PAPER_DATA="${PAPER_DATA:-alfworld_sft_large_mistral.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=alfworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
