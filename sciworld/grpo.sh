#!/usr/bin/env bash
# Shared GRPO launcher for a ScienceWorld agent inside the world model (swift rlhf --rlhf_type grpo):
# every knob with a generic default, the checks, GPU/CPU detection and the one swift line. Run it
# through a model's launcher, sciworld/run_sciworld_{qwen3,lfm,mistral}_grpo.sh, which exports that
# model's defaults (MODEL_PATH, TEMPLATE, STOP_WORDS, RUN_NAME, LR, BETA, vLLM memory, offloading, ...)
# and LAUNCHER (its own name, used in messages) and execs this script; run directly, it trains the
# Qwen3-4B agent under the run name sciworld_grpo.
# Every env step is answered by the local responder or the WM proxy at WM_ENDPOINT; the reward comes
# from the trajectory (sciworld/sciworld_plugin.py). Start the WM first (scripts/wm_stack.py start).
# Hardware: 1 H100/H200 per run (full parameters, bf16, vLLM colocate; see the model launchers); with
# NUM_GPUS=0 it runs on CPU in float32 without vLLM, for tiny models only.
# Runtime: hours to a day or more for 3 epochs of the full task set; ~1 min for one step of a tiny
# model on CPU.
#
# Every knob is an environment variable; extra arguments are appended to the swift command line:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ DATA=runs/sciworld_data/rl_train.jsonl bash sciworld/run_sciworld_qwen3_grpo.sh
#
# Outputs: $OUTPUT_DIR/v<N>-<timestamp>/ (checkpoints, logging.jsonl, completions.jsonl, trajectories.jsonl).
set -euo pipefail

LAUNCHER="${LAUNCHER:-$(basename "${BASH_SOURCE[0]}")}"   # the script the user ran, for messages
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/swift_launch.sh"   # DEFAULT_SWIFT, GPUS_VISIBLE, use_gpus

# ── knobs ────────────────────────────────────────────────────────────────────────────────────────
SWIFT="${SWIFT:-$DEFAULT_SWIFT}"
MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"
MODEL_TYPE="${MODEL_TYPE:-}"
TEMPLATE="${TEMPLATE:-qwen3_nothinking}"
STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|>}"
USE_HF="${USE_HF:-true}"
DATA="${DATA:-$ROOT/runs/sciworld_data/rl_train.jsonl}"
WM_ENDPOINT="${WM_ENDPOINT:-http://127.0.0.1:30000/}"
SCIWORLD_WM_GUARD="${SCIWORLD_WM_GUARD:-1}"
RUN_NAME="${RUN_NAME:-sciworld_grpo}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/runs/sciworld/$RUN_NAME}"
NUM_GPUS="${NUM_GPUS:-$GPUS_VISIBLE}"
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-$(seq -s, 0 $((NUM_GPUS - 1)))}"
MASTER_PORT="${MASTER_PORT:-29500}"
TORCH_DTYPE="${TORCH_DTYPE:-$([ "$NUM_GPUS" -gt 0 ] && echo bfloat16 || echo float32)}"
USE_VLLM="${USE_VLLM:-$([ "$NUM_GPUS" -gt 0 ] && echo true || echo false)}"
VLLM_MODE="${VLLM_MODE:-colocate}"
VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.3}"
VLLM_MAX_MODEL_LEN="${VLLM_MAX_MODEL_LEN:-16384}"
SLEEP_LEVEL="${SLEEP_LEVEL:-1}"
OFFLOAD_MODEL="${OFFLOAD_MODEL:-false}"
OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-false}"
MAX_TURNS="${MAX_TURNS:-50}"
NUM_GENERATIONS="${NUM_GENERATIONS:-8}"
MAX_COMPLETION_LENGTH="${MAX_COMPLETION_LENGTH:-256}"
MAX_LENGTH="${MAX_LENGTH:-16384}"
EPOCHS="${EPOCHS:-3}"
PER_DEVICE_TRAIN_BATCH_SIZE="${PER_DEVICE_TRAIN_BATCH_SIZE:-1}"
GRAD_ACCUM_STEPS="${GRAD_ACCUM_STEPS:-8}"
LR="${LR:-1e-6}"
LR_SCHED="${LR_SCHED:-constant}"
WARMUP_RATIO="${WARMUP_RATIO:-0.05}"
MAX_GRAD_NORM="${MAX_GRAD_NORM:-0.5}"
BETA="${BETA:-0.1}"
TEMPERATURE="${TEMPERATURE:-0.9}"
TOP_P="${TOP_P:-0.95}"
NUM_ITERATIONS="${NUM_ITERATIONS:-1}"
GRADIENT_CHECKPOINTING="${GRADIENT_CHECKPOINTING:-$([ "$NUM_GPUS" -gt 0 ] && echo true || echo false)}"
SAVE_STEPS="${SAVE_STEPS:-20}"
SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-3}"
LOGGING_STEPS="${LOGGING_STEPS:-1}"
DATASET_NUM_PROC="${DATASET_NUM_PROC:-4}"
DATALOADER_NUM_WORKERS="${DATALOADER_NUM_WORKERS:-4}"
REPORT_TO="${REPORT_TO:-$([ -n "${WANDB_API_KEY:-}" ] && echo wandb || echo none)}"
CHECK_MODEL="${CHECK_MODEL:-false}"
SEED="${SEED:-42}"

# ── checks and derived flags ─────────────────────────────────────────────────────────────────────
if [ ! -f "$DATA" ]; then
  echo "$LAUNCHER: DATA '$DATA' not found. Build the RL rows from the real env with" \
       "python sciworld/build_wm_dataset.py --out-dir runs/sciworld_data, or point DATA at an rl_*.jsonl." >&2
  exit 2
fi
read -r -a STOP_WORD_ARGS <<<"$STOP_WORDS"
OPTIONAL=()
[ -n "$MODEL_TYPE" ] && OPTIONAL+=(--model_type "$MODEL_TYPE")
if [ "$USE_VLLM" = true ]; then
  OPTIONAL+=(--vllm_mode "$VLLM_MODE" --vllm_gpu_memory_utilization "$VLLM_GPU_MEMORY_UTILIZATION"
             --vllm_max_model_len "$VLLM_MAX_MODEL_LEN" --sleep_level "$SLEEP_LEVEL")
fi
use_gpus "$LAUNCHER" "CPU run in $TORCH_DTYPE without vLLM"
export CUDA_VISIBLE_DEVICES WM_ENDPOINT SCIWORLD_WM_GUARD PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
echo "$LAUNCHER: $MODEL_PATH on $DATA, WM $WM_ENDPOINT (guard $SCIWORLD_WM_GUARD) -> $OUTPUT_DIR;" \
     "$NUM_GPUS GPU(s), vLLM $USE_VLLM, $NUM_GENERATIONS generations x $MAX_TURNS turns"

"$SWIFT" rlhf \
  --rlhf_type grpo \
  --model "$MODEL_PATH" \
  --template "$TEMPLATE" \
  --use_hf "$USE_HF" \
  --check_model "$CHECK_MODEL" \
  --external_plugins "$ROOT/sciworld/sciworld_plugin.py" \
  --multi_turn_scheduler sciworld_scheduler \
  --reward_funcs sciworld_reward \
  --max_turns "$MAX_TURNS" \
  --completion_length_limit_scope per_round \
  --stop_words "${STOP_WORD_ARGS[@]}" \
  --tuner_type full \
  --use_vllm "$USE_VLLM" \
  --offload_model "$OFFLOAD_MODEL" \
  --offload_optimizer "$OFFLOAD_OPTIMIZER" \
  --torch_dtype "$TORCH_DTYPE" \
  --dataset "$DATA" \
  --split_dataset_ratio 0 \
  --max_completion_length "$MAX_COMPLETION_LENGTH" \
  --max_length "$MAX_LENGTH" \
  --num_train_epochs "$EPOCHS" \
  --per_device_train_batch_size "$PER_DEVICE_TRAIN_BATCH_SIZE" \
  --gradient_accumulation_steps "$GRAD_ACCUM_STEPS" \
  --learning_rate "$LR" \
  --lr_scheduler_type "$LR_SCHED" \
  --warmup_ratio "$WARMUP_RATIO" \
  --max_grad_norm "$MAX_GRAD_NORM" \
  --num_generations "$NUM_GENERATIONS" \
  --temperature "$TEMPERATURE" \
  --top_p "$TOP_P" \
  --num_iterations "$NUM_ITERATIONS" \
  --beta "$BETA" \
  --loss_scale default \
  --gradient_checkpointing "$GRADIENT_CHECKPOINTING" \
  --save_steps "$SAVE_STEPS" \
  --save_total_limit "$SAVE_TOTAL_LIMIT" \
  --logging_steps "$LOGGING_STEPS" \
  --dataset_num_proc "$DATASET_NUM_PROC" \
  --dataloader_num_workers "$DATALOADER_NUM_WORKERS" \
  --log_completions true \
  --report_to "$REPORT_TO" \
  --run_name "$RUN_NAME" \
  --seed "$SEED" \
  --output_dir "$OUTPUT_DIR" \
  "${OPTIONAL[@]}" \
  "$@"
