#!/usr/bin/env bash
# SFT of a Mistral-7B-Instruct agent on ScienceWorld demonstrations (swift sft, full parameters), the
# warm start before GRPO (run_sciworld_mistral_grpo.sh). DATA holds chat rows {"messages": [...]}:
# sft_train.jsonl from sciworld/build_wm_dataset.py (gold runs that scored 100) or your own demonstrations.
# Template: ms-swift's "llama" (its registered template for Mistral-7B-Instruct-v0.1..v0.3).
# Hardware: 1 H200 for 7B full-parameter bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1);
# NUM_GPUS=0 runs on CPU in float32, for tiny models only.
# Runtime: under an hour for a few hundred demos (1 epoch) on 1 GPU.
#
# This file holds the Mistral defaults only; every other knob, the checks and the swift line are in
# scripts/lib/agent_sft.sh. Every knob is an environment variable; extra arguments are appended to the swift
# command line:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_mistral_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-mistralai/Mistral-7B-Instruct-v0.3}"
export TEMPLATE="${TEMPLATE:-llama}"
export RUN_NAME="${RUN_NAME:-sciworld_mistral_sft}"
export EPOCHS="${EPOCHS:-1}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export LR="${LR:-2e-6}"
export SAVE_STEPS="${SAVE_STEPS:-5}"
export PAPER_DATA="${PAPER_DATA:-sciworld_sft_gpt_perfect_mistral.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=sciworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
