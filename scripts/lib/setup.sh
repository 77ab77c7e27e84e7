#!/usr/bin/env bash
# What the paper's `bash setup.sh` (sdar/, wedlm/, llm_training/) does, here: nothing to clone (the SDAR and
# WeDLM trainers and decoders and the ms-swift launchers are this package's), so it makes the checkout's
# venv and installs the package as the README's install does, once; a second run checks and exits.
# Hardware: any. Runtime: minutes for the first install, a second after.
#
#   bash sdar/setup.sh            (or wedlm/setup.sh, llm_training/setup.sh; from any folder)
#
# A CUDA torch installed in .venv beforehand is kept (the README: install your CUDA build first).
# The paper's FLASH_ATTN_WHL (a flash-attn wheel) is installed when given; VENV_DIR is not used.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WHO="${SETUP_CALLER:-setup.sh}"
VENV="$ROOT/.venv"
[ -n "${VENV_DIR:-}" ] && echo "$WHO: notice: VENV_DIR is not used here; the venv is $VENV" >&2
[ -x "$VENV/bin/python" ] || { echo "$WHO: making $VENV"; python3 -m venv "$VENV"; }
if "$VENV/bin/python" -c "import textwm" 2>/dev/null; then
  echo "$WHO: textwm is installed in $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
else
  TORCH=("torch==2.13.0")
  "$VENV/bin/python" -c "import torch" 2>/dev/null && TORCH=()   # keep a torch already there (CUDA builds)
  echo "$WHO: installing the package into $VENV (the README's install)"
  "$VENV/bin/pip" install "${TORCH[@]}" -e "$ROOT[all]"
fi
if [ -n "${FLASH_ATTN_WHL:-}" ]; then
  "$VENV/bin/pip" install "$FLASH_ATTN_WHL"
fi
echo "$WHO: done; activate with: source $VENV/bin/activate"
