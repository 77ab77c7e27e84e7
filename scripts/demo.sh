#!/usr/bin/env bash
# The embedded default (README's main job): the whole two-stage pipeline in miniature on a CPU.
# Real ScienceWorld data (--env alfworld: ALFWorld games built offline) -> tiny AR and SDAR world models -> one scorer -> GRPO of a tiny agent
# inside the SDAR world model (swift rlhf) -> agent and world-model evaluation on the real env ->
# <out>/report.md. Hardware: 2 CPU cores. Runtime: ~8 min (--smoke: ~2 min). Resumable.
#
#   scripts/demo.sh [--smoke] [--fresh] [--out DIR] [--tasks ...] [--train-steps N] ...   (--help lists all)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_PYTHON="python3"
[ -x "$ROOT/.venv/bin/python" ] && DEFAULT_PYTHON="$ROOT/.venv/bin/python"
PYTHON="${PYTHON:-$DEFAULT_PYTHON}"
exec "$PYTHON" "$ROOT/scripts/demo.py" "$@"
