#!/usr/bin/env bash
# Shared SFT launcher for an agent on demonstrations of any env (swift sft, full parameters), the warm
# start before GRPO. Run it through an env's model launcher (sciworld/run_sciworld_qwen3_sft.sh,
# alfworld/run_alfworld_mistral_sft.sh, ...), which exports ENV_NAME, that model's defaults (MODEL_PATH,
# TEMPLATE, RUN_NAME, EPOCHS, batch size, LR, SAVE_STEPS) and LAUNCHER (its own name, used in messages).
# DATA holds chat rows {"messages": [system, user, assistant, user, ...]}: sft_train.jsonl from the env's
# dataset builder (expert / gold runs that succeeded) or your own.
# Hardware: 1 H100/H200 per run in bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1); with
# NUM_GPUS=0 it runs on CPU in float32, for tiny models only.
# Runtime: minutes to under an hour for a few hundred demos on 1 GPU; ~20 s for one step of a tiny
# model on CPU.
#
# Every knob is an environment variable with its default; `python -m textwm.rl.sft_launch --help` lists them,
# and `--print-command` (the first argument) shows the swift line they make. Extra arguments are appended to
# the swift command line:
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_qwen3_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO launcher.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENV_NAME="${ENV_NAME:?set ENV_NAME (sciworld, alfworld, ...): run an env launcher such as sciworld/run_sciworld_qwen3_sft.sh}"
export LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"
# DATA unset: the paper's file in <env>/data/ (PAPER_DATA: its names, set by the env launcher; the first
# that exists), as the paper's run scripts read data/<name> from the env folder; else our builder's output.
export PAPER_DATA="${PAPER_DATA:-}"
if [ -z "${DATA:-}" ]; then
  for name in $PAPER_DATA; do
    if [ -f "$ROOT/$ENV_NAME/data/$name" ]; then DATA="$ROOT/$ENV_NAME/data/$name"; break; fi
  done
fi
export DATA="${DATA:-$ROOT/runs/${ENV_NAME}_data/sft_train.jsonl}"
export OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/$ENV_NAME/${RUN_NAME:-${ENV_NAME}_sft}}"
[ -x "$ROOT/.venv/bin/swift" ] && export SWIFT="${SWIFT:-$ROOT/.venv/bin/swift}"
DEFAULT_PYTHON="python3"
[ -x "$ROOT/.venv/bin/python" ] && DEFAULT_PYTHON="$ROOT/.venv/bin/python"

FLAGS=()   # a first argument --print-command prints the swift line instead of running it
if [ "${1:-}" = "--print-command" ]; then FLAGS+=(--print-command); shift; fi
exec "${PYTHON:-$DEFAULT_PYTHON}" -m textwm.rl.sft_launch --env "$ENV_NAME" "${FLAGS[@]}" -- "$@"
