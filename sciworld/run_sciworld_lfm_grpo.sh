#!/usr/bin/env bash
# GRPO of a Liquid LFM2.5 agent on ScienceWorld tasks inside the world model (swift rlhf --rlhf_type grpo).
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py). Start the WM first (scripts/wm_stack.py start).
# LFM2.5 is not in ms-swift's model registry: it loads through transformers with the chatml template.
# A small model: higher learning rate, lower KL weight, more vLLM memory than the Qwen3 run.
# Hardware: 1 H100/H200 for the 1.2B agent (full parameters, bf16, vLLM colocate); NUM_GPUS=0 runs on
# CPU in float32 without vLLM, for tiny models only.
# Runtime: several hours for 3 epochs of the full task set on 1 GPU.
#
# Its values are recipes/sciworld/lfm25_grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   MODEL_PATH=runs/sciworld/sciworld_lfm_sft/v0-.../checkpoint-20 WM_ENDPOINT=http://127.0.0.1:30000/ \
#     DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_lfm_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/lfm25_grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
