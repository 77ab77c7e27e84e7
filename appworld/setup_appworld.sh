#!/usr/bin/env bash
# Make AppWorld's own interpreter: a venv with appworld==0.1.3.post1 (pydantic 1) and `appworld install` done.
# textwm (pydantic 2) drives the real apps through it (src/textwm/envs/appworld/apps_runner.py).
# CPU only, ~45 s, needs PyPI. Run from the repo root:  bash appworld/setup_appworld.sh
# Then the real env finds it at .venv-appworld/bin/python (or set TEXTWM_APPWORLD_PYTHON to VENV/bin/python).
set -euo pipefail

VENV="${VENV:-.venv-appworld}"                 # where the venv goes (git-ignored at the default)
PYTHON="${PYTHON:-.venv/bin/python}"           # textwm's interpreter (runs the library function)
WRITE_SPECS="${WRITE_SPECS:-}"                 # a path: also write api_specs.json there from the new venv

"$PYTHON" -m textwm.envs.appworld.apps_python --create-venv "$VENV" ${WRITE_SPECS:+--write-specs "$WRITE_SPECS"}
