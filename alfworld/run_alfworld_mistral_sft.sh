#!/usr/bin/env bash
# SFT of Mistral-7B on ALFWorld expert demos (swift sft, full parameters), the warm start of the
# paper's Mistral GRPO run (run_alfworld_mistral_grpo.sh).
# DATA: sft_train.jsonl of alfworld/build_wm_dataset.py (the handcoded expert's winning episodes,
# "Action: <command>" turns) or alfworld/build_sft_expert.py.
# Hardware: 1 H100/H200 in bf16; NUM_GPUS=0: CPU in float32, tiny models only.
# Runtime: about an hour for 1,200 demos x 3 epochs on 1 GPU.
#
# Its values are recipes/alfworld/mistral_sft.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.sft_launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   DATA=runs/alfworld_data/sft_train.jsonl bash alfworld/run_alfworld_mistral_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO script.
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/mistral_sft.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_sft.sh" "$@"
