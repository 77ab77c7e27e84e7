#!/usr/bin/env bash
# SFT of a Qwen3 agent on ScienceWorld demonstrations (swift sft, full parameters), the warm start
# before GRPO (run_sciworld_qwen3_grpo.sh). DATA holds chat rows {"messages": [system, user, assistant,
# user, ...]}: sft_train.jsonl from sciworld/build_wm_dataset.py (gold runs that scored 100) or your own.
# Hardware: 1 H100/H200 for a 4B model in bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1); with
# NUM_GPUS=0 it runs on CPU in float32, for tiny models only.
# Runtime: minutes for a few hundred demos on 1 GPU; ~20 s for one step of a tiny model on CPU.
#
# Its values are recipes/sciworld/qwen3_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_qwen3_sft.sh
#   NUM_GPUS=0 MODEL_PATH=runs/tiny_agent MODEL_TYPE=qwen3 TEMPLATE=qwen3 MAX_LENGTH=2048 \
#     bash sciworld/run_sciworld_qwen3_sft.sh --max_steps 1              # tiny CPU smoke run
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/qwen3_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
