#!/usr/bin/env bash
# GRPO of Qwen/Qwen3-4B-Instruct-2507 on AppWorld inside the world model (swift rlhf --rlhf_type grpo), the paper's run.
# Every tool call is answered by the local responder or the WM proxy at WM_ENDPOINT
# (APPWORLD_WM_GUARD=0: every call to the WM); the reward comes from the trajectory
# (appworld/appworld_plugin.py). The paper's rows (appworld_rl_split_clean.jsonl) work as they are. Start the
# WM first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 (full parameters, bf16, vLLM colocate at 0.3); NUM_GPUS=0: CPU, tiny models only. The paper starts from its Qwen3 SFT checkpoint: MODEL_PATH=<run_qwen_sft.sh checkpoint>.
# Runtime: a few hours for 3 epochs of 34 tasks x 8 generations x 10 turns.
#
# This file holds the model's defaults only; AppWorld's are in appworld_grpo.sh, the checks and the swift line
# in python -m textwm.rl.launch (scripts/lib/agent_grpo.sh). Every knob is an environment variable; extra
# arguments are appended to the swift command line:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=../shared/data/appworld_rl_split_clean.jsonl bash appworld/run_qwen_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
export TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
export STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|>}"
export RUN_NAME="${RUN_NAME:-appworld_qwen_grpo}"
# NUM_GPUS: the GPUs in CUDA_VISIBLE_DEVICES when it is set (the paper's scripts take the count from it), else 1.
export NUM_GPUS="${NUM_GPUS:-$(if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true; else echo 1; fi)}"
export LR="${LR:-1e-6}"
export BETA="${BETA:-0.1}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.3}"
export PAPER_DATA="${PAPER_DATA:-appworld_rl_split_clean.jsonl}"   # the paper's DATA, used from <env>/data/ when there
export LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/appworld_grpo.sh" "$@"
