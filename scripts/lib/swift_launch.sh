# Shared by the ms-swift launchers (llm_training/{train,eval}.sh, sciworld/{sft,grpo}.sh); sourced
# after they set ROOT, never run on its own. It sets
#   DEFAULT_SWIFT  the checkout's .venv/bin/swift when there is one, else `swift` on the PATH;
#   GPUS_VISIBLE   GPUs in CUDA_VISIBLE_DEVICES when it is set, else those nvidia-smi lists (0 without);
# and defines use_gpus, called once NUM_GPUS and MASTER_PORT are final.

DEFAULT_SWIFT="swift"
[ -x "$ROOT/.venv/bin/swift" ] && DEFAULT_SWIFT="$ROOT/.venv/bin/swift"
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
  GPUS_VISIBLE="$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)"
else
  GPUS_VISIBLE="$( (command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null) | grep -c '^GPU' || true)"
fi

# use_gpus LAUNCHER WHAT: with NUM_GPUS > 1 swift re-launches itself under torchrun (NPROC_PER_NODE,
# MASTER_PORT); with NUM_GPUS=0 the GPUs are hidden and the CPU fallback is announced on stderr.
use_gpus() {
  if [ "$NUM_GPUS" -gt 1 ]; then
    export NPROC_PER_NODE="$NUM_GPUS" MASTER_PORT
  else
    unset NPROC_PER_NODE
  fi
  if [ "$NUM_GPUS" -eq 0 ]; then
    export CUDA_VISIBLE_DEVICES=""
    echo "$1: warning: no GPU (NUM_GPUS=0): $2; only tiny models are practical" >&2
  fi
}
