#!/usr/bin/env bash
# Shared GRPO launcher for an agent of any env inside the world model (swift rlhf --rlhf_type grpo).
# Run it through an env's model launcher (sciworld/run_sciworld_qwen3_grpo.sh,
# alfworld/run_alfworld_qwen3_grpo.sh, ...), which exports RECIPE (its recipes/<env>/<model>_grpo.yaml: the env,
# the model and the paper's values) and LAUNCHER (its own name, used in messages); or set ENV_NAME.
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT
# (<ENV>_WM_GUARD=0: every step to the WM); the reward comes from the trajectory. Start the WM
# first (scripts/wm_stack.py start).
# Hardware: 1-4 H100/H200 per run (full parameters, bf16, vLLM colocate); with NUM_GPUS=0 it runs on
# CPU in float32 without vLLM, for tiny models only.
# Runtime: hours to a day or more for the full task set; ~1 min for one step of a tiny model on CPU.
#
# Every knob is an environment variable with the paper's default; `python -m textwm.rl.launch --help`
# lists them, and `--print-command` (the first argument) shows the swift line they make. Extra arguments
# are appended to the swift command line:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_qwen3_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# DATA unset: the paper's file in <env>/data/ of this checkout (the recipe's paper_data names it), as the paper's run
# scripts read data/<name> from the env folder; else our builder's runs/<env>_data/ (both under TEXTWM_ROOT).
export LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"
source "$ROOT/scripts/lib/run_module.sh"

FLAGS=()
[ -n "${RECIPE:-}" ] && FLAGS+=(--recipe "$RECIPE")
[ -n "${ENV_NAME:-}" ] && FLAGS+=(--env "$ENV_NAME")
run_module "$ROOT" textwm.rl.launch "${FLAGS[@]}" -- "$@"
