#!/usr/bin/env bash
# SFT of a Qwen3 agent on ScienceWorld demonstrations (swift sft, full parameters), the warm start
# before GRPO (run_sciworld_qwen3_grpo.sh). DATA holds chat rows {"messages": [system, user, assistant,
# user, ...]}: sft_train.jsonl from sciworld/build_wm_dataset.py (gold runs that scored 100) or your own.
# Hardware: 1 H100/H200 for a 4B model in bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1); with
# NUM_GPUS=0 it runs on CPU in float32, for tiny models only.
# Runtime: minutes for a few hundred demos on 1 GPU; ~20 s for one step of a tiny model on CPU.
#
# This file holds the Qwen3 defaults only; every other knob, the checks and the swift line are in
# scripts/lib/agent_sft.sh. Every knob is an environment variable; extra arguments are appended to the swift
# command line:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_qwen3_sft.sh
#   NUM_GPUS=0 MODEL_PATH=runs/tiny_agent MODEL_TYPE=qwen3 TEMPLATE=qwen3 MAX_LENGTH=2048 \
#     bash sciworld/run_sciworld_qwen3_sft.sh --max_steps 1              # tiny CPU smoke run
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
export TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
export RUN_NAME="${RUN_NAME:-sciworld_qwen3_sft}"
export EPOCHS="${EPOCHS:-1}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export LR="${LR:-2e-6}"
export SAVE_STEPS="${SAVE_STEPS:-5}"
export PAPER_DATA="${PAPER_DATA:-sciworld_sft_gpt_perfect_full_prompt.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=sciworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
