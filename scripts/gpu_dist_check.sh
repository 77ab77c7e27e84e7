#!/usr/bin/env bash
# Distributed-training check of the one trainer on 2 GPUs: DDP, DeepSpeed ZeRO-2, ZeRO-3 and FSDP.
# Hardware: 2 GPUs (an H200 pair here). Runtime: ~6 min. Needs `deepspeed` importable (pip install
# deepspeed; on a machine without internet carry its wheel, see scripts/results/README.md).
#   1. one ~0.5B random Qwen3-0.6B-shaped SDAR model (65,536 embedding rows);
#   2. for each backend: STEPS optimizer steps of the SDAR objective (bf16, flex attention, packing)
#      under torchrun on 2 GPUs, a checkpoint every STEPS/2 steps, then greedy generation with the
#      saved model on the bundled held-out sample (proves the saved weights load as an SDAR checkpoint);
#   3. ZeRO-3 resume: restart from the middle checkpoint (model, optimizer shards, scheduler, RNG).
# Prints one line per backend: seconds, first/last logged loss, tokens/s, generated rows and errors.
# (30 steps teach a 0.5B random model little: the point is that every backend trains, saves a loadable
# checkpoint and resumes, with the same losses; quality is scripts/gpu_check.sh's subject.)
#
#   OUT=runs/gpu_dist STEPS=30 scripts/gpu_dist_check.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/runs/gpu_dist}"
STEPS="${STEPS:-30}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$ROOT"
mkdir -p "$OUT"
"$PY" -c "import torch, transformers, accelerate, deepspeed; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'accelerate', accelerate.__version__, 'deepspeed', deepspeed.__version__,
'gpus', torch.cuda.device_count())"

CUDA_VISIBLE_DEVICES=0 "$PY" scripts/make_tiny_model.py --family sdar --size qwen3-0.6b --embedding-rows 65536 \
  --out "$OUT/init"

COMMON=(model_name_or_path="$OUT/init" max_steps="$STEPS" save_steps=$((STEPS / 2)) logging_steps=5 eval_file='""')

train() {  # train NAME [key=value ...]
  local name="$1"; shift
  local start=$(date +%s)
  CONFIG=sdar/configs/gpu_check.yaml NUM_GPUS=2 TORCHRUN="$PY -m torch.distributed.run" sdar/train_sft.sh \
    "${COMMON[@]}" output_dir="$OUT/$name" "$@" > "$OUT/train_$name.log" 2>&1 \
    || { tail -n 40 "$OUT/train_$name.log"; echo "$name: training FAILED"; return 1; }
  echo $(( $(date +%s) - start )) > "$OUT/seconds_$name"
}

generate() {  # generate NAME: greedy generation with the saved model (it must load as an SDAR checkpoint)
  CUDA_VISIBLE_DEVICES=0 "$PY" sdar/eval_generate.py --model-path "$OUT/$1" --data-dir data/samples \
    --file-pattern 'sciworld_wm_{name}.jsonl' --datasets test --per-batch 32 --output-dir "$OUT/gen_$1" \
    --num-gpus 1 --gen-length 64 --temperature 0 > "$OUT/gen_$1.log" 2>&1 \
    || { tail -n 20 "$OUT/gen_$1.log"; echo "$1: generation FAILED"; return 1; }
}

summary() {  # summary NAME
  "$PY" - "$OUT" "$1" <<'EOF'
import re, sys
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[2]
log = (out / f"train_{name}.log").read_text()
losses = [float(x) for x in re.findall(r"\| loss ([0-9.]+) \|", log)]
speeds = [float(x) for x in re.findall(r"\| ([0-9.]+) tok/s", log)]
gen_log = out / f"gen_{name}.log"
generated = re.findall(r"test: (\d+ rows) .*\((\d+) ERROR rows\)", gen_log.read_text()) if gen_log.exists() else []
gen = f"{generated[-1][0]}, {generated[-1][1]} errors" if generated else "not run"
print(f"{name:12s} {(out / f'seconds_{name}').read_text().strip():>4s} s  loss {losses[0]:.3f} -> {losses[-1]:.3f}"
      f"  {speeds[-1]:.0f} tok/s (rank 0)  generation: {gen}")
EOF
}

status=0
for backend in ddp zero2 zero3 fsdp; do
  case "$backend" in
    ddp)   extra=() ;;
    zero2) extra=(deepspeed=sdar/configs/ds_z2.json) ;;
    zero3) extra=(deepspeed=sdar/configs/ds_z3.json) ;;
    fsdp)  extra=("fsdp=full_shard auto_wrap") ;;
  esac
  { train "$backend" "${extra[@]}" && generate "$backend"; } || status=1
done
# ZeRO-3 resume from the middle checkpoint: optimizer shards and scheduler come back, steps continue.
if train zero3_resume deepspeed=sdar/configs/ds_z3.json output_dir="$OUT/zero3" \
     resume_from_checkpoint="$OUT/zero3/checkpoint-$((STEPS / 2))"; then
  grep -iE "continuing training|resum" "$OUT/train_zero3_resume.log" | head -n 3 || true
else
  status=1
fi

echo "backend      time    loss (first -> last logged)  speed                    generation"
for backend in ddp zero2 zero3 fsdp zero3_resume; do
  [ -f "$OUT/seconds_$backend" ] && summary "$backend" || echo "$backend: no result"
done
exit $status
