#!/usr/bin/env bash
# GRPO of Mistral-7B on ScienceWorld inside the Qwen world model, under the paper's name.
# The WM is whatever WM_ENDPOINT serves (the paper's: its Qwen WM behind the proxy). The paper also
# replayed each episode in a real env server (SCIWORLD_ENV_URL=http://localhost:30004); set SCIWORLD_ENV_URL
# to a running sciworld_env_server.py for that; unset, the reward is the simulated trajectory's.
# Hardware: 4 H100/H200 (torchrun, DeepSpeed ZeRO-2, bf16, vLLM colocate at 0.25).
# Runtime: about a day for 3 epochs.
#
# Its values are recipes/sciworld/mistral_grpo_qwenwm.yaml; each is also an environment variable or a flag (python -m
# textwm.rl.launch --help). Extra arguments are appended to the swift command line; a first argument
# --print-command prints that line instead of running it:
#
#   WM_ENDPOINT=http://127.0.0.1:30000/ CUDA_VISIBLE_DEVICES=0,1,2,3 bash run_sciworld_mistral_grpo_qwenwm.sh
set -euo pipefail

export RECIPE="$(dirname "${BASH_SOURCE[0]}")/../recipes/sciworld/mistral_grpo_qwenwm.yaml" LAUNCHER="${LAUNCHER:-${BASH_SOURCE[0]##*/}}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/agent_grpo.sh" "$@"
