#!/usr/bin/env bash
# Shared GRPO launcher for a ScienceWorld agent inside the world model (swift rlhf --rlhf_type grpo).
# Run it through a model's launcher, sciworld/run_sciworld_{qwen3,lfm,mistral}_grpo.sh, which exports
# that model's defaults (MODEL_PATH, TEMPLATE, STOP_WORDS, RUN_NAME, LR, BETA, vLLM memory, offloading,
# ...) and LAUNCHER (its own name, used in messages); run directly, it trains the Qwen3-4B agent.
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT
# (SCIWORLD_WM_GUARD=0: every step to the WM); the reward comes from the trajectory. Start the WM
# first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 per run (full parameters, bf16, vLLM colocate); with NUM_GPUS=0 it runs on CPU
# in float32 without vLLM, for tiny models only.
# Runtime: hours to a day or more for 3 epochs of the full task set; ~1 min for one step of a tiny
# model on CPU.
#
# Every knob is an environment variable with the paper's default; `python -m textwm.rl.launch --help`
# lists them, and `--print-command` shows the swift line they make. Extra arguments are appended to
# the swift command line:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_qwen3_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"
export DATA="${DATA:-$ROOT/runs/sciworld_data/rl_train.jsonl}"
export OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/sciworld/${RUN_NAME:-sciworld_grpo}}"
DEFAULT_PYTHON="python3"
[ -x "$ROOT/.venv/bin/python" ] && DEFAULT_PYTHON="$ROOT/.venv/bin/python"

exec "${PYTHON:-$DEFAULT_PYTHON}" -m textwm.rl.launch --env sciworld -- "$@"
