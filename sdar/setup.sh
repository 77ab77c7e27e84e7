#!/usr/bin/env bash
# The paper's `bash setup.sh` in sdar/: makes the checkout's venv and installs this package (nothing to clone).
# Hardware: any. Runtime: minutes the first time, a second after (scripts/lib/setup.sh).
SETUP_CALLER="sdar/setup.sh" exec bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/setup.sh" "$@"
