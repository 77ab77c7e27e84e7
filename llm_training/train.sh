#!/usr/bin/env bash
# Full-parameter SFT of an autoregressive world model with ms-swift (`swift sft --tuner_type full`).
# Hardware: 8x H100/H200 for the paper's Qwen3-8B runs (bf16, flash-attn, packing, DeepSpeed ZeRO-2);
# with no GPU visible it falls back to a float32/sdpa/no-packing CPU run, meant for tiny models only.
# Runtime: hours for an 8B model on 8 GPUs; ~10 s for one step of a tiny model on CPU.
#
# Every knob is an environment variable (table in llm_training/README.md); extra arguments are
# appended to the swift command line, so they override the knobs:
#
#   TRAIN_FILE=runs/ar_data/train.jsonl VAL_FILE=runs/ar_data/test.jsonl RUN_NAME=qwen3_8b \
#     bash llm_training/train.sh
#   NUM_GPUS=0 MODEL=runs/tiny_ar MODEL_TYPE=qwen3 TEMPLATE=qwen3 REPORT_TO=none \
#     bash llm_training/train.sh --max_steps 1          # tiny CPU smoke run
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step> (`last-checkpoint` links the newest).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/swift_launch.sh"   # DEFAULT_SWIFT, GPUS_VISIBLE, use_gpus
source "$ROOT/scripts/lib/paper_env.sh"
paper_env "$(dirname "${BASH_SOURCE[0]}")" train.sh VENV_DIR

# ── knobs ────────────────────────────────────────────────────────────────────────────────────────
SWIFT="${SWIFT:-$DEFAULT_SWIFT}"
MODEL="${MODEL:-Qwen/Qwen3-8B}"
MODEL_TYPE="${MODEL_TYPE:-}"
TEMPLATE="${TEMPLATE:-}"
USE_HF="${USE_HF:-true}"
# llm_training/data (where the paper's `python prepare_data.py` run from llm_training/ writes) when it has
# a train.jsonl, else runs/ar_data.
PAPER_DATA_DIR="$ROOT/llm_training/data"
DATA_DIR="${DATA_DIR:-$([ -f "$PAPER_DATA_DIR/train.jsonl" ] && echo "$PAPER_DATA_DIR" || echo "$ROOT/runs/ar_data")}"
TRAIN_FILE="${TRAIN_FILE:-$DATA_DIR/train.jsonl}"
VAL_FILE="${VAL_FILE-$DATA_DIR/test.jsonl}"
RUN_NAME="${RUN_NAME:-ar_sft}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/llm_training/$RUN_NAME}"
NUM_GPUS="${NUM_GPUS:-$GPUS_VISIBLE}"
MASTER_PORT="${MASTER_PORT:-29500}"
TORCH_DTYPE="${TORCH_DTYPE:-$([ "$NUM_GPUS" -gt 0 ] && echo bfloat16 || echo float32)}"
ATTN_IMPL="${ATTN_IMPL:-$([ "$NUM_GPUS" -gt 0 ] && echo flash_attn || echo sdpa)}"
PACKING="${PACKING:-$([ "$NUM_GPUS" -gt 0 ] && echo true || echo false)}"
DEEPSPEED="${DEEPSPEED:-$([ "$NUM_GPUS" -gt 0 ] && echo zero2 || echo none)}"
EPOCHS="${EPOCHS:-2}"
PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-2}"
PER_DEVICE_EVAL_BATCH_SIZE="${PER_DEVICE_EVAL_BATCH_SIZE:-2}"
GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
LR="${LR:-2e-5}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"
WARMUP_RATIO="${WARMUP_RATIO:-0.03}"
LR_SCHED="${LR_SCHED:-cosine}"
MAX_LEN="${MAX_LEN:-8192}"
GRADIENT_CHECKPOINTING="${GRADIENT_CHECKPOINTING:-true}"
EVAL_STEPS="${EVAL_STEPS:-500}"
SAVE_STEPS="${SAVE_STEPS:-500}"
SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
LOGGING_STEPS="${LOGGING_STEPS:-10}"
DATASET_NUM_PROC="${DATASET_NUM_PROC:-$(( $(nproc) < 16 ? $(nproc) : 16 ))}"
DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-4}"
REPORT_TO="${REPORT_TO:-$([ -n "${WANDB_API_KEY:-}" ] && echo wandb || echo none)}"
CHECK_MODEL="${CHECK_MODEL:-false}"
SEED="${SEED:-42}"

# ── checks and derived flags ─────────────────────────────────────────────────────────────────────
if [ ! -f "$TRAIN_FILE" ]; then
  echo "train.sh: TRAIN_FILE '$TRAIN_FILE' not found. Write it with llm_training/prepare_data.py" \
       "(--out-dir $DATA_DIR) or point TRAIN_FILE at a JSONL of {\"messages\": [...]} rows." >&2
  exit 2
fi
if [ -n "$VAL_FILE" ] && [ ! -f "$VAL_FILE" ]; then
  echo "train.sh: VAL_FILE '$VAL_FILE' not found; point it at a JSONL or set VAL_FILE= to train without eval." >&2
  exit 2
fi
OPTIONAL=()
[ -n "$MODEL_TYPE" ] && OPTIONAL+=(--model_type "$MODEL_TYPE")
[ -n "$TEMPLATE" ] && OPTIONAL+=(--template "$TEMPLATE")
[ -n "$VAL_FILE" ] && OPTIONAL+=(--val_dataset "$VAL_FILE")
[ "$DEEPSPEED" != "none" ] && OPTIONAL+=(--deepspeed "$DEEPSPEED")
use_gpus train.sh "CPU run in $TORCH_DTYPE with $ATTN_IMPL attention, packing=$PACKING"
export PYTHONUNBUFFERED=1
echo "train.sh: $MODEL on $TRAIN_FILE (val: ${VAL_FILE:-none}) -> $OUTPUT_DIR; $NUM_GPUS GPU(s), $TORCH_DTYPE, $ATTN_IMPL"

"$SWIFT" sft \
  --model "$MODEL" \
  --use_hf "$USE_HF" \
  --check_model "$CHECK_MODEL" \
  --tuner_type full \
  --dataset "$TRAIN_FILE" \
  --torch_dtype "$TORCH_DTYPE" \
  --attn_impl "$ATTN_IMPL" \
  --packing "$PACKING" \
  --max_length "$MAX_LEN" \
  --num_train_epochs "$EPOCHS" \
  --per_device_train_batch_size "$PER_DEVICE_TRAIN_BATCH_SIZE" \
  --per_device_eval_batch_size "$PER_DEVICE_EVAL_BATCH_SIZE" \
  --gradient_accumulation_steps "$GRAD_ACCUM_STEPS" \
  --learning_rate "$LR" \
  --weight_decay "$WEIGHT_DECAY" \
  --warmup_ratio "$WARMUP_RATIO" \
  --lr_scheduler_type "$LR_SCHED" \
  --gradient_checkpointing "$GRADIENT_CHECKPOINTING" \
  --eval_steps "$EVAL_STEPS" \
  --save_steps "$SAVE_STEPS" \
  --save_total_limit "$SAVE_TOTAL_LIMIT" \
  --logging_steps "$LOGGING_STEPS" \
  --dataset_num_proc "$DATASET_NUM_PROC" \
  --packing_num_proc "$DATASET_NUM_PROC" \
  --dataloader_num_workers "$DATALOADER_NUM_WORKERS" \
  --seed "$SEED" \
  --output_dir "$OUTPUT_DIR" \
  --report_to "$REPORT_TO" \
  --run_name "$RUN_NAME" \
  "${OPTIONAL[@]}" \
  "$@"
