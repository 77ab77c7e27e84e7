#!/usr/bin/env bash
# GRPO of a Mistral-7B-Instruct agent on ScienceWorld tasks inside the world model (swift rlhf --rlhf_type grpo).
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py). Start the WM first (scripts/wm_stack.py start).
# Template: ms-swift's "llama" (its registered template for Mistral-7B-Instruct-v0.1..v0.3).
# Hardware: 1 H200 (full parameters, bf16, vLLM colocate; model and optimizer offloaded to CPU during
# rollouts to make room for vLLM); NUM_GPUS=0 runs on CPU without vLLM, for tiny models only.
# Runtime: a day or more for 3 epochs of the full task set on 1 GPU.
#
# This file holds the Mistral defaults only; every other knob, the checks and the swift line are in
# scripts/lib/agent_grpo.sh (python -m textwm.rl.launch). Every knob is an environment variable; extra arguments are appended to the swift
# command line:
#
#   MODEL_PATH=runs/sciworld/sciworld_mistral_sft/v0-.../checkpoint-10 WM_ENDPOINT=http://127.0.0.1:30000/ \
#     DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_mistral_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-mistralai/Mistral-7B-Instruct-v0.3}"
export TEMPLATE="${TEMPLATE:-llama}"
export STOP_WORDS="${STOP_WORDS:-</s>}"
export RUN_NAME="${RUN_NAME:-sciworld_mistral_grpo}"
export LR="${LR:-1e-6}"
export BETA="${BETA:-0.1}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.3}"
export OFFLOAD_MODEL="${OFFLOAD_MODEL:-true}"
export OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-true}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
export PAPER_DATA="${PAPER_DATA:-sciworld_rl_split_mistral.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=sciworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
