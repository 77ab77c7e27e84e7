#!/usr/bin/env bash
# SFT of Qwen3-4B on ALFWorld expert demos (swift sft, full parameters), the paper's README_alfworld.md run.
# DATA: as run_lfm25_alfworld_sft.sh. The paper's template was qwen3; ours for this non-thinking
# Instruct-2507 model is qwen3_nothinking, as in our other Qwen3 launchers (TEMPLATE=qwen3 for the paper's).
# Hardware: 1 H100/H200 in bf16.
# Runtime: about an hour for 1,500 demos x 1 epoch.
#
# Its values are recipes/alfworld/qwen3_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_qwen3_alfworld_sft.sh
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/qwen3_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
