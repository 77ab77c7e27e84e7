#!/usr/bin/env bash
# GRPO of Mistral-7B (after its SFT, run_alfworld_mistral_sft.sh) on ALFWorld inside the world model (swift rlhf --rlhf_type grpo), the paper's run.
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT
# (ALFWORLD_WM_GUARD=0: every step to the WM); the reward comes from the trajectory
# (alfworld/alfworld_plugin.py). The paper's rows (alfworld_rl.jsonl) work as they are. Start the WM
# first (scripts/wm_stack.py start).
# Hardware: 4 H100/H200 (torchrun, DeepSpeed ZeRO-2, bf16, vLLM colocate at 0.3); NUM_GPUS=0: CPU,
# tiny models only.
# Runtime: several hours for one epoch of 300 tasks x 8 generations x 30 turns.
#
# Its values are recipes/alfworld/mistral_grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=../shared/data/alfworld_rl.jsonl bash alfworld/run_alfworld_mistral_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/alfworld/mistral_grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
