#!/usr/bin/env bash
# GRPO of Qwen3-4B on ScienceWorld inside the Qwen world model, under the paper's name.
# WM and replay: as run_sciworld_mistral_grpo_qwenwm.sh.
# Hardware: 4 H100/H200 (torchrun, DeepSpeed ZeRO-2, bf16, vLLM colocate at 0.3).
# Runtime: about a day for 3 epochs.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_sciworld_qwen3_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ CUDA_VISIBLE_DEVICES=0,1,2,3 bash run_sciworld_qwen3_grpo_qwenwm.sh
set -euo pipefail

export NUM_GPUS="${NUM_GPUS:-$(if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true; else echo 4; fi)}"
export DEEPSPEED="${DEEPSPEED-$([ "$NUM_GPUS" -gt 1 ] && echo zero2)}"
export RUN_NAME="${RUN_NAME:-sciworld_qwen3_grpo_qwenwm}"
export LR="${LR:-5e-7}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_sciworld_qwen3_grpo.sh" "$@"
