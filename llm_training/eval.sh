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
# to $OUTPUT_DIR/eval_loss.tsv. Extra arguments are appended to every swift command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/swift_launch.sh"   # DEFAULT_SWIFT, GPUS_VISIBLE, use_gpus
source "$ROOT/scripts/lib/paper_env.sh"
paper_env "$(dirname "${BASH_SOURCE[0]}")" eval.sh VENV_DIR

# ── knobs ────────────────────────────────────────────────────────────────────────────────────────
SWIFT="${SWIFT:-$DEFAULT_SWIFT}"
MODEL_DIR="${MODEL_DIR:-$ROOT/runs/llm_training/ar_sft}"
MODEL_TYPE="${MODEL_TYPE:-}"
TEMPLATE="${TEMPLATE:-}"
USE_HF="${USE_HF:-true}"
PAPER_DATA_DIR="$ROOT/llm_training/data"    # as train.sh
DATA_DIR="${DATA_DIR:-$([ -f "$PAPER_DATA_DIR/test.jsonl" ] && echo "$PAPER_DATA_DIR" || echo "$ROOT/runs/ar_data")}"
VAL_FILE="${VAL_FILE:-$DATA_DIR/test.jsonl}"
EVAL_FILES="${EVAL_FILES:-$VAL_FILE}"
OUTPUT_DIR="${OUTPUT_DIR:-${OUTPUT_BASE:-}}"   # OUTPUT_BASE: the paper's name
NUM_GPUS="${NUM_GPUS:-$GPUS_VISIBLE}"
MASTER_PORT="${MASTER_PORT:-29501}"
TORCH_DTYPE="${TORCH_DTYPE:-$([ "$NUM_GPUS" -gt 0 ] && echo bfloat16 || echo float32)}"
ATTN_IMPL="${ATTN_IMPL:-$([ "$NUM_GPUS" -gt 0 ] && echo flash_attn || echo sdpa)}"
PACKING="${PACKING:-$([ "$NUM_GPUS" -gt 0 ] && echo true || echo false)}"
DEEPSPEED="${DEEPSPEED:-none}"
MAX_LEN="${MAX_LEN:-8192}"
PER_DEVICE_EVAL_BATCH_SIZE="${PER_DEVICE_EVAL_BATCH_SIZE:-2}"
DATASET_NUM_PROC="${DATASET_NUM_PROC:-$(( $(nproc) < 16 ? $(nproc) : 16 ))}"
DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-4}"
CHECK_MODEL="${CHECK_MODEL:-false}"

# ── checks and derived flags ─────────────────────────────────────────────────────────────────────
# The paper's train.sh wrote to llm_training/output/<run>; ours writes to runs/llm_training/<run>.
if [ ! -e "$MODEL_DIR" ] && [[ "$MODEL_DIR" == output/* || "$MODEL_DIR" == ./output/* ]] \
    && [ -d "$ROOT/runs/llm_training/$(basename "$MODEL_DIR")" ]; then
  echo "eval.sh: notice: $MODEL_DIR is not here; using train.sh's $ROOT/runs/llm_training/$(basename "$MODEL_DIR")" >&2
  MODEL_DIR="$ROOT/runs/llm_training/$(basename "$MODEL_DIR")"
fi
CHECKPOINT="$MODEL_DIR"
if [ -d "$MODEL_DIR" ] && [ ! -f "$MODEL_DIR/config.json" ]; then
  CHECKPOINT="$(ls -d "$MODEL_DIR"/last-checkpoint "$MODEL_DIR"/v*/last-checkpoint 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$CHECKPOINT" ] || { echo "eval.sh: no config.json and no last-checkpoint under MODEL_DIR '$MODEL_DIR'" >&2; exit 2; }
  CHECKPOINT="$(cd "$CHECKPOINT" && pwd -P)"
elif [ ! -e "$MODEL_DIR" ] && [[ "$MODEL_DIR" == /* || "$MODEL_DIR" == .* ]]; then
  echo "eval.sh: MODEL_DIR '$MODEL_DIR' not found (give a checkpoint, a train.sh OUTPUT_DIR or a hub id)" >&2
  exit 2
fi
[ -d "$CHECKPOINT" ] && OUTPUT_DIR="${OUTPUT_DIR:-$CHECKPOINT/eval_loss}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/llm_training/eval_loss}"
for EVAL_FILE in $EVAL_FILES; do
  [ -f "$EVAL_FILE" ] || { echo "eval.sh: eval file '$EVAL_FILE' not found (set VAL_FILE or EVAL_FILES)" >&2; exit 2; }
done
OPTIONAL=()
[ -n "$MODEL_TYPE" ] && OPTIONAL+=(--model_type "$MODEL_TYPE")
[ -n "$TEMPLATE" ] && OPTIONAL+=(--template "$TEMPLATE")
[ "$DEEPSPEED" != "none" ] && OPTIONAL+=(--deepspeed "$DEEPSPEED")
use_gpus eval.sh "CPU eval in $TORCH_DTYPE with $ATTN_IMPL attention"
export PYTHONUNBUFFERED=1
mkdir -p "$OUTPUT_DIR"
SUMMARY="$OUTPUT_DIR/eval_loss.tsv"
printf 'file\teval_loss\teval_token_acc\n' >"$SUMMARY"

for EVAL_FILE in $EVAL_FILES; do
  OUT="$OUTPUT_DIR/$(basename "$EVAL_FILE" .jsonl)"
  rm -f "$OUT/logging.jsonl"   # swift appends; keep only this run's metrics
  echo "eval.sh: $CHECKPOINT on $EVAL_FILE -> $OUT"
  # `--dataset FILE#1`: swift insists on a training set; one row of it is encoded and never trained on.
  "$SWIFT" sft \
    --model "$CHECKPOINT" \
    --use_hf "$USE_HF" \
    --check_model "$CHECK_MODEL" \
    --tuner_type full \
    --dataset "$EVAL_FILE#1" \
    --val_dataset "$EVAL_FILE" \
    --num_train_epochs 0 \
    --eval_on_start true \
    --save_strategy no \
    --torch_dtype "$TORCH_DTYPE" \
    --attn_impl "$ATTN_IMPL" \
    --packing "$PACKING" \
    --max_length "$MAX_LEN" \
    --per_device_eval_batch_size "$PER_DEVICE_EVAL_BATCH_SIZE" \
    --dataset_num_proc "$DATASET_NUM_PROC" \
    --packing_num_proc "$DATASET_NUM_PROC" \
    --dataloader_num_workers "$DATALOADER_NUM_WORKERS" \
    --output_dir "$OUT" \
    --add_version false \
    --report_to none \
    "${OPTIONAL[@]}" \
    "$@"
  LOSS="$(sed -n 's/.*"eval_loss": \([^,}]*\).*/\1/p' "$OUT/logging.jsonl" 2>/dev/null | head -n 1 || true)"
  ACC="$(sed -n 's/.*"eval_token_acc": \([^,}]*\).*/\1/p' "$OUT/logging.jsonl" 2>/dev/null | head -n 1 || true)"
  [ -n "$LOSS" ] || { echo "eval.sh: swift reported no eval_loss in $OUT/logging.jsonl" >&2; exit 1; }
  printf '%s\t%s\t%s\n' "$EVAL_FILE" "$LOSS" "$ACC" >>"$SUMMARY"
  echo "eval.sh: eval_loss=$LOSS eval_token_acc=$ACC ($EVAL_FILE)"
done
echo "eval.sh: summary in $SUMMARY"
