#!/usr/bin/env bash
# SFT of LFM2.5-1.2B on the AppWorld tool-call demos (swift sft, full parameters), the warm start of
# run_lfm25_sft_grpo_v2.sh.
# DATA: chat rows of tool calls and <tool_response> turns (the paper's appworld_sft_gpt_agent.jsonl as it is,
# or sft_train.jsonl of appworld/build_wm_dataset.py).
# Hardware: 1 H100/H200 in bf16; NUM_GPUS=0: CPU in float32, tiny models only.
# Runtime: minutes for 33 demos x 3 epochs on 1 GPU.
#
# This file holds the model's defaults only; every other knob and the swift line are in scripts/lib/agent_sft.sh.
#
#   DATA=../shared/data/appworld_sft_gpt_agent.jsonl bash appworld/run_lfm25_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-LiquidAI/LFM2.5-1.2B-Instruct}"
export TEMPLATE="${TEMPLATE:-chatml}"
export RUN_NAME="${RUN_NAME:-appworld_lfm25_sft}"
export MAX_LENGTH="${MAX_LENGTH:-4096}"
export EPOCHS="${EPOCHS:-3}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-2}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
export LR="${LR:-2e-5}"
export PAPER_DATA="${PAPER_DATA:-appworld_sft_lfm25.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=appworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
