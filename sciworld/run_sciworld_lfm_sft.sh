#!/usr/bin/env bash
# SFT of a Liquid LFM2.5 agent on ScienceWorld demonstrations (swift sft, full parameters), the warm
# start before GRPO (run_sciworld_lfm_grpo.sh). DATA holds chat rows {"messages": [...]}: sft_train.jsonl
# from sciworld/build_wm_dataset.py (gold runs that scored 100) or your own demonstrations.
# LFM2.5 is not in ms-swift's model registry: it loads through transformers with the chatml template.
# Hardware: 1 H100/H200 (bf16; DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1); NUM_GPUS=0 runs on CPU
# in float32, for tiny models only.
# Runtime: minutes for a few hundred demos (5 epochs) on 1 GPU.
#
# This file holds the LFM2.5 defaults only; every other knob, the checks and the swift line are in
# scripts/lib/agent_sft.sh. Every knob is an environment variable; extra arguments are appended to the swift
# command line:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_lfm_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-LiquidAI/LFM2.5-1.2B-Instruct}"
export TEMPLATE="${TEMPLATE:-chatml}"
export RUN_NAME="${RUN_NAME:-sciworld_lfm_sft}"
export EPOCHS="${EPOCHS:-5}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-2}"
export LR="${LR:-5e-6}"
export SAVE_STEPS="${SAVE_STEPS:-10}"
export PAPER_DATA="${PAPER_DATA:-sciworld_sft_gpt_perfect.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=sciworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
