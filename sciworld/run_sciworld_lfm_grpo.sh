#!/usr/bin/env bash
# GRPO of a Liquid LFM2.5 agent on ScienceWorld tasks inside the world model (swift rlhf --rlhf_type grpo).
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py). Start the WM first (scripts/wm_stack.py start).
# LFM2.5 is not in ms-swift's model registry: it loads through transformers with the chatml template.
# A small model: higher learning rate, lower KL weight, more vLLM memory than the Qwen3 run.
# Hardware: 1 H100/H200 for the 1.2B agent (full parameters, bf16, vLLM colocate); NUM_GPUS=0 runs on
# CPU in float32 without vLLM, for tiny models only.
# Runtime: several hours for 3 epochs of the full task set on 1 GPU.
#
# This file holds the LFM2.5 defaults only; every other knob, the checks and the swift line are in
# scripts/lib/agent_grpo.sh (python -m textwm.rl.launch). Every knob is an environment variable; extra arguments are appended to the swift
# command line:
#
#   MODEL_PATH=runs/sciworld/sciworld_lfm_sft/v0-.../checkpoint-20 WM_ENDPOINT=http://127.0.0.1:30000/ \
#     DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_lfm_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-LiquidAI/LFM2.5-1.2B-Instruct}"
export TEMPLATE="${TEMPLATE:-chatml}"
export STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|>}"
export RUN_NAME="${RUN_NAME:-sciworld_lfm_grpo}"
export LR="${LR:-3e-6}"
export BETA="${BETA:-0.05}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.4}"
export OFFLOAD_MODEL="${OFFLOAD_MODEL:-false}"
export OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-false}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
export PAPER_DATA="${PAPER_DATA:-sciworld_rl_split.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=sciworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
