#!/usr/bin/env bash
# Full-parameter SFT of an autoregressive world model with ms-swift (`swift sft --tuner_type full`).
# Hardware: 8x H100/H200 for the paper's Qwen3-8B runs (bf16, flash-attn, packing, DeepSpeed ZeRO-2);
# with no GPU visible it falls back to a float32/sdpa/no-packing CPU run, meant for tiny models only.
# Runtime: hours for an 8B model on 8 GPUs; ~10 s for one step of a tiny model on CPU.
#
# Every knob is an environment variable (table in llm_training/README.md; `python -m textwm.training.swift_sft
# --help` lists them with their defaults), and `--print-command` (the first argument) shows the swift line they
# make. Extra arguments are appended to the swift command line, so they override the knobs:
#
#   TRAIN_FILE=runs/ar_data/train.jsonl VAL_FILE=runs/ar_data/test.jsonl RUN_NAME=qwen3_8b \
#     bash llm_training/train.sh
#   NUM_GPUS=0 MODEL=runs/tiny_ar MODEL_TYPE=qwen3 TEMPLATE=qwen3 REPORT_TO=none \
#     bash llm_training/train.sh --max_steps 1          # tiny CPU smoke run
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step> (`last-checkpoint` links the newest).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/paper_env.sh"
paper_env "$(dirname "${BASH_SOURCE[0]}")" train.sh VENV_DIR
# Default paths (DATA_DIR: llm_training/data when it has a train.jsonl, else runs/ar_data; OUTPUT_DIR) are under
# TEXTWM_ROOT: this checkout.
export LAUNCHER="${LAUNCHER:-train.sh}"
source "$ROOT/scripts/lib/run_module.sh"

FLAGS=()
if [ -n "${VAL_FILE+set}" ] && [ -z "$VAL_FILE" ]; then FLAGS+=(--val-file none); fi   # VAL_FILE=: no eval
run_module "$ROOT" textwm.training.swift_sft "${FLAGS[@]}" -- "$@"
