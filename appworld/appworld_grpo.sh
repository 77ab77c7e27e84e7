#!/usr/bin/env bash
# AppWorld's GRPO defaults (the paper's: 10 turns, 8 generations, temperature 0.9, top-p 0.95, 512 completion
# tokens, WM answers of up to 2048 tokens, grad norm 0.5, constant LR, save every 10 steps), then the shared
# GRPO launcher. Run a model launcher
# (run_qwen_grpo.sh, run_lfm25_grpo.sh, run_mistral_grpo.sh), which exports the model's knobs and execs this.
# Every knob is an environment variable; extra arguments go to the swift command line.
set -euo pipefail

export EPOCHS="${EPOCHS:-3}"
export MAX_TURNS="${MAX_TURNS:-10}"
export NUM_GENERATIONS="${NUM_GENERATIONS:-8}"
export TEMPERATURE="${TEMPERATURE:-0.9}"
export TOP_P="${TOP_P:-0.95}"
export MAX_GRAD_NORM="${MAX_GRAD_NORM:-0.5}"
export LR_SCHED="${LR_SCHED:-constant}"
export MAX_COMPLETION_LENGTH="${MAX_COMPLETION_LENGTH:-512}"
export WM_MAX_TOKENS="${WM_MAX_TOKENS:-2048}"   # listing responses run to thousands of characters
export MAX_LENGTH="${MAX_LENGTH:-16384}"
export VLLM_MAX_MODEL_LEN="${VLLM_MAX_MODEL_LEN:-$MAX_LENGTH}"
export SAVE_STEPS="${SAVE_STEPS:-10}"
export SAVE_TOTAL_LIMIT="${SAVE_TOTAL_LIMIT:-5}"
export DEEPSPEED="${DEEPSPEED-$([ "${NUM_GPUS:-1}" -gt 1 ] && echo zero2)}"
export ENV_NAME=appworld
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
