#!/usr/bin/env bash
# SFT of LFM2.5-1.2B on ALFWorld expert demos (swift sft, full parameters), the paper's README_alfworld.md run.
# DATA: sft_train.jsonl of alfworld/build_wm_dataset.py or alfworld/build_sft_expert.py, or the paper's file.
# Hardware: 1 H100/H200 in bf16.
# Runtime: well under an hour for 1,500 demos x 1 epoch.
#
# Its values are recipes/alfworld/lfm25_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_lfm25_alfworld_sft.sh
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/lfm25_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
