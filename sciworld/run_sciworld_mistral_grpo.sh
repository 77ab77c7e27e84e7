#!/usr/bin/env bash
# GRPO of a Mistral-7B-Instruct agent on ScienceWorld tasks inside the world model (swift rlhf --rlhf_type grpo).
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py). Start the WM first (scripts/wm_stack.py start).
# Template: ms-swift's "llama" (its registered template for Mistral-7B-Instruct-v0.1..v0.3).
# Hardware: 1 H200 (full parameters, bf16, vLLM colocate; model and optimizer offloaded to CPU during
# rollouts to make room for vLLM); NUM_GPUS=0 runs on CPU without vLLM, for tiny models only.
# Runtime: a day or more for 3 epochs of the full task set on 1 GPU.
#
# Its values are recipes/sciworld/mistral_grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   MODEL_PATH=runs/sciworld/sciworld_mistral_sft/v0-.../checkpoint-10 WM_ENDPOINT=http://127.0.0.1:30000/ \
#     DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_mistral_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/mistral_grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
