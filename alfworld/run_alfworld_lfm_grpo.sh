#!/usr/bin/env bash
# GRPO of LFM2.5-1.2B on ALFWorld inside the world model (swift rlhf --rlhf_type grpo), the paper's run.
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT
# (ALFWORLD_WM_GUARD=0: every step to the WM); the reward comes from the trajectory
# (alfworld/alfworld_plugin.py). The paper's rows (alfworld_rl.jsonl) work as they are. Start the WM
# first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 (full parameters, bf16, vLLM colocate at 0.4 of the memory); NUM_GPUS=0: CPU,
# tiny models only.
# Runtime: several hours for one epoch of 300 tasks x 8 generations x 30 turns.
#
# This file holds the model's and the paper's ALFWorld defaults only; the checks and the swift line are
# python -m textwm.rl.launch (scripts/lib/agent_grpo.sh). Every knob is an environment variable; extra
# arguments are appended to the swift command line:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=../shared/data/alfworld_rl.jsonl bash alfworld/run_alfworld_lfm_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-LiquidAI/LFM2.5-1.2B-Instruct}"
export TEMPLATE="${TEMPLATE:-chatml}"
export STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|> <|tool_call_end|>}"
export RUN_NAME="${RUN_NAME:-alfworld_lfm_grpo}"
# NUM_GPUS: the GPUs in CUDA_VISIBLE_DEVICES when it is set (the paper's scripts take the count from it), else 1.
export NUM_GPUS="${NUM_GPUS:-$(if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true; else echo 1; fi)}"
export LR="${LR:-5e-7}"
export BETA="${BETA:-0.05}"
export EPOCHS="${EPOCHS:-1}"
export MAX_TURNS="${MAX_TURNS:-30}"
export MAX_COMPLETION_LENGTH="${MAX_COMPLETION_LENGTH:-128}"
export MAX_LENGTH="${MAX_LENGTH:-32768}"
export VLLM_MAX_MODEL_LEN="${VLLM_MAX_MODEL_LEN:-32768}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.4}"
export SAVE_STEPS="${SAVE_STEPS:-10}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
export PAPER_DATA="${PAPER_DATA:-alfworld_rl.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${BASH_SOURCE[0]##*/}"
export ENV_NAME=alfworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
