#!/usr/bin/env bash
# GRPO of Mistral-7B on ScienceWorld inside the Qwen world model, under the paper's name.
# The WM is whatever WM_ENDPOINT serves (the paper's: its Qwen WM behind the proxy). The paper also
# replayed each episode in a real env server (SCIWORLD_ENV_URL=http://localhost:30004); set SCIWORLD_ENV_URL
# to a running sciworld_env_server.py for that; unset, the reward is the simulated trajectory's.
# Hardware: 4 H100/H200 (torchrun, DeepSpeed ZeRO-2, bf16, vLLM colocate at 0.25).
# Runtime: about a day for 3 epochs.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_sciworld_mistral_grpo.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ CUDA_VISIBLE_DEVICES=0,1,2,3 bash run_sciworld_mistral_grpo_qwenwm.sh
set -euo pipefail

export NUM_GPUS="${NUM_GPUS:-$(if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true; else echo 4; fi)}"
export DEEPSPEED="${DEEPSPEED-$([ "$NUM_GPUS" -gt 1 ] && echo zero2)}"
export RUN_NAME="${RUN_NAME:-sciworld_mistral_grpo_qwenwm}"
export LR="${LR:-5e-7}"
export VLLM_GPU_MEMORY_UTILIZATION="${VLLM_GPU_MEMORY_UTILIZATION:-0.25}"
export OFFLOAD_MODEL="${OFFLOAD_MODEL:-false}"
export OFFLOAD_OPTIMIZER="${OFFLOAD_OPTIMIZER:-false}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_sciworld_mistral_grpo.sh" "$@"
