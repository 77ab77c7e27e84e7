#!/usr/bin/env bash
# GRPO of a Qwen3 agent on ScienceWorld tasks inside the world model (swift rlhf --rlhf_type grpo).
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py), or with SCIWORLD_ENV_URL from its replay in the real
# env server (sciworld/sciworld_env_server.py). Start the WM first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 for a 4B agent (full parameters, bf16, vLLM colocate); with NUM_GPUS=0 it
# runs on CPU in float32 without vLLM, for tiny models only.
# Runtime: about a day for 3 epochs of the full task set; ~1 min for one step of a tiny model on CPU.
#
# Its values are recipes/sciworld/qwen3_grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_qwen3_grpo.sh
#   DATA=<paper repo>/sciworld/data/sciworld_rl_split.jsonl bash sciworld/run_sciworld_qwen3_grpo.sh  # released rows
#   SCIWORLD_ENV_URL=http://127.0.0.1:30003 DATA=... bash sciworld/run_sciworld_qwen3_grpo.sh  # real-env replay reward
#   MODEL_PATH=runs/sciworld/sciworld_qwen3_sft/v0-.../checkpoint-40 bash sciworld/run_sciworld_qwen3_grpo.sh
#   NUM_GPUS=0 MODEL_PATH=runs/tiny_agent MODEL_TYPE=qwen3 TEMPLATE=qwen3 NUM_GENERATIONS=2 \
#     PER_DEVICE_TRAIN_BATCH_SIZE=2 GRAD_ACCUM_STEPS=1 MAX_TURNS=3 MAX_COMPLETION_LENGTH=16 \
#     bash sciworld/run_sciworld_qwen3_grpo.sh --max_steps 1            # tiny CPU smoke run
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/qwen3_grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
