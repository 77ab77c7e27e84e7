#!/usr/bin/env bash
# GPU check of the trainer's speed and memory switches. Hardware: one H200. Runtime: ~7 min.
#   1. loss-curve parity: a ~0.5B random Qwen3-0.6B-shaped model (65,536 embedding rows) trained STEPS
#      steps with each objective in OBJECTIVES twice from the same seed and rows - the plain path
#      (loss_impl logits, adamw_torch) and the fast one (FAST: chunked loss, fused AdamW, compiled
#      layers, selective checkpointing) - on the bundled ScienceWorld sample; the two loss curves are
#      compared step by step (scripts/compare_loss_curves.py, within TOLERANCE);
#   2. the speed/memory table is scripts/bench_train.py (its docstring has the commands).
#
#   OUT=runs/train_speed STEPS=200 scripts/gpu_train_speed.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/runs/train_speed}"
STEPS="${STEPS:-200}"
OBJECTIVES="${OBJECTIVES:-ar sdar wedlm}"
TOLERANCE="${TOLERANCE:-0.02}"
FAST="${FAST:-loss_impl=chunked optim=adamw_torch_fused torch_compile=true gradient_checkpointing=true gradient_checkpointing_mode=ops}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
cd "$ROOT"
mkdir -p "$OUT"
status=0
for obj in $OBJECTIVES; do
  block=$([ "$obj" = wedlm ] && echo 32 || echo 4)
  "$PY" scripts/make_tiny_model.py --family "$obj" --size qwen3-0.6b --embedding-rows 65536 --block-size "$block" \
    --out "$OUT/init_$obj" > /dev/null
  for arm in plain fast; do
    extra=$([ "$arm" = fast ] && echo "$FAST" || echo "loss_impl=logits optim=adamw_torch")
    start=$(date +%s)
    # shellcheck disable=SC2086  # $extra is a list of key=value overrides
    "$PY" sdar/train.py --config sdar/configs/gpu_check.yaml model_name_or_path="$OUT/init_$obj" objective="$obj" \
      block_length="$block" output_dir="$OUT/${obj}_$arm" max_steps="$STEPS" logging_steps=10 eval_steps=100000 \
      $extra 2>&1 | grep -E "textwm|Error|error" > "$OUT/train_${obj}_$arm.log" || true
    echo "train $obj $arm: $(( $(date +%s) - start )) s" | tee -a "$OUT/timings.txt"
  done
  echo "== $obj: plain vs fast ($FAST)" | tee "$OUT/curves_$obj.txt"
  "$PY" scripts/compare_loss_curves.py "$OUT/train_${obj}_plain.log" "$OUT/train_${obj}_fast.log" \
    --tolerance "$TOLERANCE" | tee -a "$OUT/curves_$obj.txt" || status=1
done
exit $status
