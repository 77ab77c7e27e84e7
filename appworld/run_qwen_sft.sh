#!/usr/bin/env bash
# SFT of Qwen3-4B on the AppWorld tool-call demos (swift sft, full parameters), the warm start of the paper's
# Qwen3 GRPO run (run_qwen_grpo.sh).
# DATA: chat rows of tool calls and <tool_response> turns: the paper's appworld_sft_gpt_agent.jsonl as it is,
# or sft_train.jsonl of appworld/build_wm_dataset.py.
# Hardware: 1 H100/H200 in bf16; NUM_GPUS=0: CPU in float32, tiny models only.
# Runtime: under an hour for 33 demos x 4 epochs on 1 GPU.
#
# Its values are recipes/appworld/qwen3_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   DATA=../shared/data/appworld_sft_gpt_agent.jsonl bash appworld/run_qwen_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to run_qwen_grpo.sh.
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/appworld/qwen3_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
