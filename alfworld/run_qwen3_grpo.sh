#!/usr/bin/env bash
# GRPO of Qwen3-4B on ALFWorld in the world model, the paper's GETTING_STARTED single-GPU run.
# Hardware: 1 H100/H200 (one process, no DeepSpeed, bf16, vLLM colocate at 0.3, model and optimizer offloaded).
# Runtime: most of a day for two epochs of 300 tasks x 8 generations x 30 turns.
#
# Its values are recipes/alfworld/qwen3_grpo_1gpu.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   MODEL_PATH=<SFT checkpoint> CUDA_VISIBLE_DEVICES=0 bash run_qwen3_grpo.sh
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/qwen3_grpo_1gpu.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
