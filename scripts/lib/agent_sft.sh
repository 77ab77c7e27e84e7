#!/usr/bin/env bash
# Shared SFT launcher for an agent on demonstrations of any env (swift sft, full parameters), the warm
# start before GRPO (<env>/grpo.sh): every knob with a generic default, the checks, GPU/CPU detection
# and the one swift line. Run it through an env's model launcher (sciworld/run_sciworld_qwen3_sft.sh,
# alfworld/run_alfworld_mistral_sft.sh, ...), which exports ENV_NAME, that model's defaults (MODEL_PATH,
# TEMPLATE, RUN_NAME, EPOCHS, batch size, LR, SAVE_STEPS) and LAUNCHER (its own name, used in messages)
# and execs this script.
# DATA holds chat rows {"messages": [system, user, assistant, user, ...]}: sft_train.jsonl from the env's
# dataset builder (expert / gold runs that succeeded) or your own.
# Hardware: 1 H100/H200 per run in bf16 (DeepSpeed ZeRO-2 across GPUs when NUM_GPUS > 1); with
# NUM_GPUS=0 it runs on CPU in float32, for tiny models only.
# Runtime: minutes to under an hour for a few hundred demos on 1 GPU; ~20 s for one step of a tiny
# model on CPU.
#
# Every knob is an environment variable; extra arguments are appended to the swift command line
# (a first argument --print-command prints that line instead of running it):
#
#   DATA=runs/sciworld_data/sft_train.jsonl bash sciworld/run_sciworld_qwen3_sft.sh
#
# Checkpoints land in $OUTPUT_DIR/v<N>-<timestamp>/checkpoint-<step>; pass one as MODEL_PATH to the GRPO launcher.
set -euo pipefail

LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"   # the script the user ran, for messages
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENV_NAME="${ENV_NAME:?set ENV_NAME (sciworld, alfworld, ...): run an env launcher such as sciworld/run_sciworld_qwen3_sft.sh}"
source "$ROOT/scripts/lib/swift_launch.sh"   # DEFAULT_SWIFT, GPUS_VISIBLE, use_gpus

# ── knobs ────────────────────────────────────────────────────────────────────────────────────────
SWIFT="${SWIFT:-$DEFAULT_SWIFT}"
MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
MODEL_TYPE="${MODEL_TYPE:-}"
TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
USE_HF="${USE_HF:-true}"
PAPER_DATA="${PAPER_DATA:-}"   # the paper's names of DATA, first found in <env>/data/ is the default
if [ -z "${DATA:-}" ]; then
  for name in $PAPER_DATA; do
    if [ -f "$ROOT/$ENV_NAME/data/$name" ]; then DATA="$ROOT/$ENV_NAME/data/$name"; break; fi
  done
fi
DATA="${DATA:-$ROOT/runs/${ENV_NAME}_data/sft_train.jsonl}"
VAL_DATA="${VAL_DATA:-}"
RUN_NAME="${RUN_NAME:-${ENV_NAME}_sft}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/$ENV_NAME/$RUN_NAME}"
NUM_GPUS="${NUM_GPUS:-$GPUS_VISIBLE}"
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-$(seq -s, 0 $((NUM_GPUS - 1)))}"
MASTER_PORT="${MASTER_PORT:-29500}"
DEEPSPEED="${DEEPSPEED:-$([ "$NUM_GPUS" -gt 1 ] && echo zero2 || echo none)}"
# The weights' dtype: bfloat16 under DeepSpeed (it keeps float32 master weights), else float32 (bf16 compute on
# GPU): an optimizer stepping bfloat16 weights itself loses every step smaller than ~1/256 of a weight. Float32
# weights, gradients and AdamW take ~16 bytes a parameter (a 4B model ~64 GB): for such a model on one GPU set
# DEEPSPEED=zero2 (with --offload_optimizer) or TORCH_DTYPE=bfloat16 (warned).
TORCH_DTYPE="${TORCH_DTYPE:-$([ "$NUM_GPUS" -gt 0 ] && [ "$DEEPSPEED" != none ] && echo bfloat16 || echo float32)}"
MAX_LENGTH="${MAX_LENGTH:-8192}"
EPOCHS="${EPOCHS:-1}"
PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-4}"
LR="${LR:-2e-6}"
LR_SCHED="${LR_SCHED:-cosine}"
WARMUP_RATIO="${WARMUP_RATIO:-0.1}"
MAX_GRAD_NORM="${MAX_GRAD_NORM:-1.0}"
GRADIENT_CHECKPOINTING="${GRADIENT_CHECKPOINTING:-$([ "$NUM_GPUS" -gt 0 ] && echo true || echo false)}"
SAVE_STEPS="${SAVE_STEPS:-5}"
SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
LOGGING_STEPS="${LOGGING_STEPS:-1}"
DATASET_NUM_PROC="${DATASET_NUM_PROC:-4}"
DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-4}"
REPORT_TO="${REPORT_TO:-$([ -n "${WANDB_API_KEY:-}" ] && echo wandb || echo none)}"
CHECK_MODEL="${CHECK_MODEL:-false}"
SEED="${SEED:-42}"

# ── checks and derived flags ─────────────────────────────────────────────────────────────────────
if [ ! -f "$DATA" ]; then
  PAPER_HINT=""
  if [ -n "$PAPER_DATA" ]; then
    PAPER_HINT=" or put the paper's released file ($PAPER_DATA; the paper's data/ folder, or shared/data/ of a"
    PAPER_HINT+=" checkout that has it) in $ENV_NAME/data/, where it is used when DATA is unset,"
  fi
  echo "$LAUNCHER: DATA '$DATA' not found. Build demonstrations from the real env with" \
       "python $ENV_NAME/build_wm_dataset.py --out-dir runs/${ENV_NAME}_data,$PAPER_HINT" \
       "or point DATA at a chat JSONL." >&2
  exit 2
fi
PRINT_COMMAND=false   # --print-command (first argument): print the swift line, do not run it
if [ "${1:-}" = "--print-command" ]; then PRINT_COMMAND=true; shift; fi
OPTIONAL=()
[ -n "$MODEL_TYPE" ] && OPTIONAL+=(--model_type "$MODEL_TYPE")
[ -n "$VAL_DATA" ] && OPTIONAL+=(--val_dataset "$VAL_DATA")
[ "$DEEPSPEED" != "none" ] && OPTIONAL+=(--deepspeed "$DEEPSPEED")
[ "$NUM_GPUS" -gt 0 ] && [ "$TORCH_DTYPE" = float32 ] && OPTIONAL+=(--bf16 true --fp16 false)
if [ "$NUM_GPUS" -gt 0 ] && [ "$DEEPSPEED" = none ] && [ "$TORCH_DTYPE" != float32 ]; then
  echo "$LAUNCHER: warning: $TORCH_DTYPE weights without DeepSpeed: the optimizer steps them itself and a step" \
       "smaller than ~1/256 of a weight rounds to nothing (at LR=$LR most do); leave TORCH_DTYPE unset or set" \
       "DEEPSPEED" >&2
fi
use_gpus "$LAUNCHER" "CPU run in $TORCH_DTYPE"
export CUDA_VISIBLE_DEVICES PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
COMMAND=("$SWIFT" sft \
  --model "$MODEL_PATH" \
  --template "$TEMPLATE" \
  --use_hf "$USE_HF" \
  --check_model "$CHECK_MODEL" \
  --tuner_type full \
  --dataset "$DATA" \
  --split_dataset_ratio 0 \
  --torch_dtype "$TORCH_DTYPE" \
  --max_length "$MAX_LENGTH" \
  --num_train_epochs "$EPOCHS" \
  --per_device_train_batch_size "$PER_DEVICE_TRAIN_BATCH_SIZE" \
  --gradient_accumulation_steps "$GRAD_ACCUM_STEPS" \
  --learning_rate "$LR" \
  --lr_scheduler_type "$LR_SCHED" \
  --warmup_ratio "$WARMUP_RATIO" \
  --max_grad_norm "$MAX_GRAD_NORM" \
  --gradient_checkpointing "$GRADIENT_CHECKPOINTING" \
  --save_steps "$SAVE_STEPS" \
  --save_total_limit "$SAVE_TOTAL_LIMIT" \
  --logging_steps "$LOGGING_STEPS" \
  --dataset_num_proc "$DATASET_NUM_PROC" \
  --dataloader_num_workers "$DATALOADER_NUM_WORKERS" \
  --report_to "$REPORT_TO" \
  --run_name "$RUN_NAME" \
  --seed "$SEED" \
  --output_dir "$OUTPUT_DIR" \
  "${OPTIONAL[@]}" \
  "$@")
if [ "$PRINT_COMMAND" = true ]; then
  echo "${COMMAND[*]}"
  exit 0
fi
echo "$LAUNCHER: $MODEL_PATH on $DATA -> $OUTPUT_DIR; $NUM_GPUS GPU(s), $TORCH_DTYPE"
"${COMMAND[@]}"
