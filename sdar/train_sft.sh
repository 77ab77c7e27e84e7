#!/usr/bin/env bash
# SFT of a world model with the SDAR block-diffusion objective (or `objective=ar`), one trainer.
# Hardware: 1-8 GPUs of one node (torchrun; DeepSpeed/FSDP from the YAML), or the CPU for tiny runs.
# Runtime: tiny_cpu.yaml ~1 min on 2 CPU cores; sft_example.yaml (8B, 8xH200) hours.
#
#   CONFIG=sdar/configs/sft_example.yaml NUM_GPUS=8 sdar/train_sft.sh [key=value ...]
#   CONFIG=sdar/configs/tiny_cpu.yaml NUM_GPUS=1 sdar/train_sft.sh max_steps=20
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/paper_env.sh"
paper_env "$(dirname "${BASH_SOURCE[0]}")" train_sft.sh SDAR_DIR VENV_DIR
CONFIG="${CONFIG:-$ROOT/sdar/configs/sft_example.yaml}"
NUM_GPUS="${NUM_GPUS:-8}"
MASTER_PORT="${MASTER_PORT:-29500}"
# The checkout's venv when there is one (the paper's scripts activated theirs), else torchrun on PATH.
DEFAULT_TORCHRUN=torchrun
[ -x "$ROOT/.venv/bin/torchrun" ] && DEFAULT_TORCHRUN="$ROOT/.venv/bin/torchrun"
TORCHRUN="${TORCHRUN:-$DEFAULT_TORCHRUN}"

export PYTHONUNBUFFERED=1
# TORCHRUN is split into words on purpose (e.g. TORCHRUN="python3 -m torch.distributed.run").
# shellcheck disable=SC2086
exec $TORCHRUN --standalone --nnodes 1 --nproc_per_node "$NUM_GPUS" --master_port "$MASTER_PORT" \
  "$ROOT/sdar/train.py" --config "$CONFIG" "$@"
