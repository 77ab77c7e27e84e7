#!/usr/bin/env bash
# Loss-only evaluation of a checkpoint with ms-swift: teacher-forced cross-entropy and token accuracy
# on the assistant turns of each eval JSONL (no generation; for exact match, ROUGE, etc. serve the
# model and run llm_training/evaluate.py). ms-swift 4.6 has no eval-only SFT mode, so this runs
# `swift sft` for zero epochs with `--eval_on_start true` and saves nothing.
# Hardware: the GPUs the model was trained on (bf16, flash-attn, packing) or, with none, CPU (tiny models).
# Runtime: minutes per file for an 8B model on 8 GPUs; ~10 s per file for a tiny model on CPU.
#
#   MODEL_DIR=runs/llm_training/ar_sft EVAL_FILES="runs/ar_data/test.jsonl" bash llm_training/eval.sh
#
# MODEL_DIR is a checkpoint, a hub model id, or a train.sh OUTPUT_DIR (then its newest
# `last-checkpoint`). Per file it writes $OUTPUT_DIR/<file stem>/logging.jsonl, and one row per file
# to $OUTPUT_DIR/eval_loss.tsv. Every knob is an environment variable (table in llm_training/README.md;
# `python -m textwm.training.swift_eval --help` lists them), `--print-command` (the first argument) shows
# the swift lines, and extra arguments are appended to every swift command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/paper_env.sh"
paper_env "$(dirname "${BASH_SOURCE[0]}")" eval.sh VENV_DIR
# Default paths (MODEL_DIR, DATA_DIR as train.sh's, the paper's ./output/<run>) are under TEXTWM_ROOT: this checkout.
export LAUNCHER="${LAUNCHER:-eval.sh}"
export OUTPUT_DIR="${OUTPUT_DIR:-${OUTPUT_BASE:-}}"   # OUTPUT_BASE: the paper's name
source "$ROOT/scripts/lib/run_module.sh"
run_module "$ROOT" textwm.training.swift_eval -- "$@"
