#!/usr/bin/env bash
# SFT of a Mistral-7B-Instruct agent on ScienceWorld demonstrations (swift sft, full parameters), the
# warm start before GRPO (run_sciworld_mistral_grpo.sh). DATA holds chat rows {"messages": [...]}:
# sft_train.jsonl from sciworld/build_wm_dataset.py (gold runs that scored 100) or your own demonstrations.
# Template: ms-swift's "llama" (its registered template for Mistral-7B-Instruct-v0.1..v0.3).
# Hardware: 1 H200 for 7B full-parameter bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1);
# NUM_GPUS=0 runs on CPU in float32, for tiny models only.
# Runtime: under an hour for a few hundred demos (1 epoch) on 1 GPU.
#
# Its values are recipes/sciworld/mistral_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_mistral_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/mistral_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
