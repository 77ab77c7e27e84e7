#!/usr/bin/env bash
# The paper's combined AppWorld pipeline for LFM2.5-1.2B: SFT on the tool-call demos (run_lfm25_sft.sh), then
# GRPO of the last SFT checkpoint inside the world model (run_lfm25_grpo.sh with the paper's v2 settings).
# SFT_DATA: the demos; DATA: the RL task rows; WM_ENDPOINT: the WM proxy (start it first with
# scripts/wm_stack.py start). Hardware: 1 H100/H200; NUM_GPUS=0: CPU, tiny models only.
# Runtime: the SFT's minutes plus the GRPO's hours.
#
# The SFT part takes SFT_LR, SFT_EPOCHS, SFT_OUTPUT_DIR and SFT_ARGS (extra swift sft arguments); every other
# knob is the two launchers' own. Extra arguments go to the GRPO's swift command line:
#
#   SFT_DATA=../shared/data/appworld_sft_gpt_agent.jsonl DATA=../shared/data/appworld_rl_split_clean.jsonl \
#     WM_ENDPOINT=http://127.0.0.1:30000/ bash appworld/run_lfm25_sft_grpo_v2.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SFT_DATA="${SFT_DATA:?set SFT_DATA to the demos (e.g. ../shared/data/appworld_sft_gpt_agent.jsonl)}"
SFT_OUTPUT_DIR="${SFT_OUTPUT_DIR:-$HERE/../runs/appworld/appworld_lfm25_sft}"
SFT_LR="${SFT_LR:-2e-5}"
SFT_EPOCHS="${SFT_EPOCHS:-3}"
read -r -a SFT_EXTRA <<< "${SFT_ARGS:-}"   # whitespace-separated; no argument with spaces

DATA="$SFT_DATA" OUTPUT_DIR="$SFT_OUTPUT_DIR" LR="$SFT_LR" EPOCHS="$SFT_EPOCHS" \
  bash "$HERE/run_lfm25_sft.sh" ${SFT_EXTRA[@]+"${SFT_EXTRA[@]}"}
CHECKPOINT="$( { ls -d "$SFT_OUTPUT_DIR"/v*/checkpoint-* 2>/dev/null || true; } | sort -V | tail -n 1)"
if [ -z "$CHECKPOINT" ]; then
  echo "run_lfm25_sft_grpo_v2.sh: no checkpoint under $SFT_OUTPUT_DIR after the SFT run" >&2
  exit 2
fi
echo "run_lfm25_sft_grpo_v2.sh: GRPO from $CHECKPOINT"
export MODEL_PATH="$CHECKPOINT"
export RUN_NAME="${RUN_NAME:-appworld_lfm25_sft_grpo_v2}"
export STOP_WORDS="${STOP_WORDS:-<|im_end|> <|endoftext|> <|tool_call_end|>}"
export LR="${LR:-2e-6}"
export EPOCHS="${EPOCHS:-2}"
export MAX_LENGTH="${MAX_LENGTH:-32768}"
export VLLM_MAX_MODEL_LEN="${VLLM_MAX_MODEL_LEN:-32768}"
exec bash "$HERE/run_lfm25_grpo.sh" "$@"
