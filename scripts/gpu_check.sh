#!/usr/bin/env bash
# GPU check of the trainer and the decoders.
# Hardware: one H200 (two for the torchrun step, skipped with one GPU). Runtime: ~8 min.
#   1. ~0.5B random Qwen3-0.6B-shaped models (65,536 embedding rows) trained STEPS steps with each
#      objective in OBJECTIVES (ar, sdar with block 4, wedlm with masking block 32), bf16, flex
#      attention, packing, on the bundled ScienceWorld sample;
#   2. generation with each family's decoder on the held-out sample (greedy);
#   3. the CUDA test tier (flex loss == dense loss, GPU decoding == reference);
#   4. the SDAR trainer under torchrun on 2 GPUs (DDP), if 2 are visible and sdar is in OBJECTIVES.
# The 8B decode benchmark is scripts/bench_decode.py.
#
#   OUT=runs/gpu_check STEPS=300 scripts/gpu_check.sh
#   OBJECTIVES=wedlm OUT=runs/gpu_check STEPS=300 scripts/gpu_check.sh     # one family only
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/runs/gpu_check}"
STEPS="${STEPS:-300}"
OBJECTIVES="${OBJECTIVES:-ar sdar wedlm}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$ROOT"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

for obj in $OBJECTIVES; do
  export CUDA_VISIBLE_DEVICES=0   # single-process steps use one GPU (torchrun below uses two)
  block=$([ "$obj" = wedlm ] && echo 32 || echo 4)
  "$PY" scripts/make_tiny_model.py --family "$obj" --size qwen3-0.6b --embedding-rows 65536 --block-size "$block" \
    --out "$OUT/init_$obj"
  start=$(date +%s)
  "$PY" sdar/train.py --config sdar/configs/gpu_check.yaml model_name_or_path="$OUT/init_$obj" objective="$obj" \
    block_length="$block" output_dir="$OUT/$obj" max_steps="$STEPS" 2>&1 | grep -E "textwm|Error|error" | tee "$OUT/train_$obj.log"
  echo "train $obj: $(( $(date +%s) - start )) s" | tee -a "$OUT/timings.txt"
  start=$(date +%s)
  "$PY" sdar/eval_generate.py --model-path "$OUT/$obj" --data-dir data/samples --file-pattern 'sciworld_wm_{name}.jsonl' \
    --datasets test --output-dir "$OUT/gen_$obj" --num-gpus 1 --per-batch 32 --gen-length 64 --temperature 0 \
    2>&1 | grep -E "textwm|rows|Error" | tee "$OUT/gen_$obj.log"
  echo "generate $obj: $(( $(date +%s) - start )) s" | tee -a "$OUT/timings.txt"
done

CUDA_VISIBLE_DEVICES=0 "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/pytest_gpu.log"

unset CUDA_VISIBLE_DEVICES
if [[ " $OBJECTIVES " == *" sdar "* ]] && [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  start=$(date +%s)
  CONFIG=sdar/configs/gpu_check.yaml NUM_GPUS=2 TORCHRUN="$PY -m torch.distributed.run" sdar/train_sft.sh \
    model_name_or_path="$OUT/sdar" output_dir="$OUT/sdar_ddp" max_steps=50 eval_file='""' logging_steps=10 \
    2>&1 | grep -E "textwm|Error|error" | tee "$OUT/train_sdar_ddp.log"
  echo "train sdar 2 GPUs: $(( $(date +%s) - start )) s" | tee -a "$OUT/timings.txt"
fi
