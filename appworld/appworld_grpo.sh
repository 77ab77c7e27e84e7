#!/usr/bin/env bash
# AppWorld's GRPO defaults (the paper's: 10 turns, 8 generations, temperature 0.9, top-p 0.95, 512 completion
# tokens, WM answers of up to 2048 tokens, grad norm 0.5, constant LR, save every 10 steps), then the shared
# GRPO launcher. Run a model launcher
# (run_qwen_grpo.sh, run_lfm25_grpo.sh, run_mistral_grpo.sh), which exports the model's knobs and execs this.
# Every knob is an environment variable; extra arguments go to the swift command line.
#
# Its values are recipes/appworld/grpo.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/appworld/grpo.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
