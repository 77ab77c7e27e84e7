#!/usr/bin/env bash
# GRPO of Qwen/Qwen3-4B-Instruct-2507 on AppWorld inside the world model (swift rlhf --rlhf_type grpo), the paper's run.
# Every tool call is answered by the local responder or the WM proxy at WM_ENDPOINT
# (APPWORLD_WM_GUARD=0: every call to the WM); the reward comes from the trajectory
# (appworld/appworld_plugin.py). The paper's rows (appworld_rl_split_clean.jsonl) work as they are. Start the
# WM first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 (full parameters, bf16, vLLM colocate at 0.3); NUM_GPUS=0: CPU, tiny models only. The paper starts from its Qwen3 SFT checkpoint: MODEL_PATH=<run_qwen_sft.sh checkpoint>.
# Runtime: a few hours for 3 epochs of 34 tasks x 8 generations x 10 turns.
#
# Its values are recipes/appworld/qwen3_grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=../shared/data/appworld_rl_split_clean.jsonl bash appworld/run_qwen_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/appworld/qwen3_grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
