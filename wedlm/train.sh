#!/usr/bin/env bash
# WeDLM world-model SFT with the paper's launcher knobs (patronus-ai/mdlm_world_modeling wedlm/train.sh),
# running this repository's one trainer (wedlm/train.py) instead of Tencent/WeDLM's finetune/train.py.
# CONFIG may be in the paper's keys (configs/example.yaml) or ours (configs/sft_example.yaml).
# Hardware: 1-8 GPUs of one node (torchrun when NUM_GPUS > 1), or the CPU for tiny runs (NUM_GPUS=1).
# Runtime: a tiny model on 2 CPU cores ~1 min; configs/example.yaml (8B, 8 GPUs) hours.
#
#   cd wedlm && NUM_GPUS=8 CONFIG=configs/example.yaml bash train.sh      # the paper's README line
#   NUM_GPUS=1 CONFIG=my_tiny.yaml bash wedlm/train.sh max_steps=2        # key=value overrides pass through
#
# CONFIG is looked up relative to the current folder, then to wedlm/; relative paths inside it are
# relative to the current folder (the paper's script cd's into wedlm/ first: launch from there to match).
# wedlm/.env is sourced when present (HF_TOKEN, WANDB_API_KEY, ...), as in the paper.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../scripts/lib/paper_env.sh"
paper_env "$HERE" train.sh VENV_DIR WEDLM_DIR

MIXED_PRECISION_SET="${MIXED_PRECISION+set}"
CONFIG="${CONFIG:-$HERE/configs/example.yaml}"
NUM_GPUS="${NUM_GPUS:-8}"
MIXED_PRECISION="${MIXED_PRECISION:-bf16}"
MASTER_PORT="${MASTER_PORT:-29500}"
# The checkout's venv when there is one (the paper's scripts activated theirs), else what is on PATH.
ROOT_VENV="$HERE/../.venv/bin"
PYTHON="${PYTHON:-$([ -x "$ROOT_VENV/python" ] && echo "$ROOT_VENV/python" || echo python)}"
TORCHRUN="${TORCHRUN:-$([ -x "$ROOT_VENV/torchrun" ] && echo "$ROOT_VENV/torchrun" || echo torchrun)}"

case "$MIXED_PRECISION" in
  bf16|fp16|no) ;;
  *) echo "error: MIXED_PRECISION must be bf16, fp16 or no, got '$MIXED_PRECISION'" >&2; exit 2 ;;
esac
if [ -n "$MIXED_PRECISION_SET" ]; then
  # As upstream: Tencent/WeDLM's train.py passes Accelerator(mixed_precision=...) from bf16, which wins.
  echo "notice: MIXED_PRECISION=$MIXED_PRECISION is not used: precision comes from the config's bf16 key" \
       "(as in the paper's run, where Tencent/WeDLM's Accelerator(mixed_precision=...) overrides it)" >&2
fi
if ! [[ "$NUM_GPUS" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: NUM_GPUS must be a whole number >= 1, got '$NUM_GPUS'" >&2
  exit 2
fi
if [ ! -f "$CONFIG" ] && [ -f "$HERE/$CONFIG" ]; then
  CONFIG="$HERE/$CONFIG"
elif [ ! -f "$CONFIG" ]; then
  echo "error: CONFIG=$CONFIG not found (looked in $PWD and $HERE)" >&2
  exit 2
fi

echo "=== WeDLM SFT (textwm) ===  config: $CONFIG  gpus: $NUM_GPUS" >&2
export PYTHONUNBUFFERED=1
if [ "$NUM_GPUS" -gt 1 ]; then
  # TORCHRUN is split into words on purpose (e.g. TORCHRUN="python3 -m torch.distributed.run").
  # shellcheck disable=SC2086
  exec $TORCHRUN --standalone --nnodes 1 --nproc_per_node "$NUM_GPUS" --master_port "$MASTER_PORT" \
    "$HERE/train.py" --config "$CONFIG" "$@"
fi
exec "$PYTHON" "$HERE/train.py" --config "$CONFIG" "$@"
