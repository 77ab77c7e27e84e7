#!/usr/bin/env bash
# SFT of Qwen3-4B on the AppWorld tool-call demos (swift sft, full parameters), the warm start of the paper's
# Qwen3 GRPO run (run_qwen_grpo.sh).
# DATA: chat rows of tool calls and <tool_response> turns: the paper's appworld_sft_gpt_agent.jsonl as it is,
# or sft_train.jsonl of appworld/build_wm_dataset.py.
# Hardware: 1 H100/H200 in bf16; NUM_GPUS=0: CPU in float32, tiny models only.
# Runtime: under an hour for 33 demos x 4 epochs on 1 GPU.
#
# This file holds the model's defaults only (LR 2e-6: the paper found higher rates destroy tool calling);
# every other knob and the swift line are in scripts/lib/agent_sft.sh. Every knob is an environment
# variable; extra arguments are appended:
#
#   DATA=../shared/data/appworld_sft_gpt_agent.jsonl bash appworld/run_qwen_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to run_qwen_grpo.sh.
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
export TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
export RUN_NAME="${RUN_NAME:-appworld_qwen_sft}"
export MAX_LENGTH="${MAX_LENGTH:-16384}"
export EPOCHS="${EPOCHS:-4}"
export PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
export GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
export LR="${LR:-2e-6}"
export WARMUP_RATIO="${WARMUP_RATIO:-0.1}"
export PAPER_DATA="${PAPER_DATA:-appworld_sft_gpt_agent_clean.jsonl appworld_sft_gpt_agent.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=appworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
