#!/usr/bin/env bash
# The embedded default (README's main job), CPU only, ~30 s.
# Today it scores the bundled ScienceWorld sample: real test transitions and the predictions of two
# floor baselines (copy_state, action_lookup), with every metric of the scorer, and writes the
# table and chart. The end-to-end pipeline (train AR + SDAR world models, GRPO inside them,
# real-env evaluation) replaces it when those stages land.
#
#   scripts/demo.sh [--out DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_PYTHON="python3"
[ -x "$ROOT/.venv/bin/python" ] && DEFAULT_PYTHON="$ROOT/.venv/bin/python"
PYTHON="${PYTHON:-$DEFAULT_PYTHON}"
OUT="${OUT:-$ROOT/runs/demo}"

while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

"$PYTHON" "$ROOT/sdar/evaluate.py" \
  --input-dir "$ROOT/data/samples/predictions" \
  --datasets copy_state action_lookup \
  --output-dir "$OUT/scores" \
  --title "Floor baselines on the ScienceWorld sample"
echo "demo finished: $OUT/scores/eval_summary.md and eval_summary.png"
