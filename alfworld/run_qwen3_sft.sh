#!/usr/bin/env bash
# SFT of Qwen3-4B on ALFWorld expert demos, the paper's GETTING_STARTED run (3 epochs, 16k tokens).
# DATA: as run_lfm25_sft.sh. Template: qwen3_nothinking (the paper's: qwen3), as run_qwen3_alfworld_sft.sh.
# Hardware: 1 H100/H200 in bf16.
# Runtime: a few hours for 1,500 demos x 3 epochs.
#
# Its values are recipes/alfworld/qwen3_sft_getting_started.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_qwen3_sft.sh
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/qwen3_sft_getting_started.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
