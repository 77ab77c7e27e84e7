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
# DATA unset: the paper's file in <env>/data/ of this checkout (the recipe's paper_data names it), as the paper's run
# scripts read data/<name> from the env folder; else our builder's runs/<env>_data/ (both under TEXTWM_ROOT).
export LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"
source "$ROOT/scripts/lib/run_module.sh"

FLAGS=()
[ -n "${RECIPE:-}" ] && FLAGS+=(--recipe "$RECIPE")
[ -n "${ENV_NAME:-}" ] && FLAGS+=(--env "$ENV_NAME")
run_module "$ROOT" textwm.rl.sft_launch "${FLAGS[@]}" -- "$@"
