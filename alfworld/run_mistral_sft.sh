#!/usr/bin/env bash
# SFT of Mistral-7B on ALFWorld expert demos, under the paper's name.
# Hardware: 1 H100/H200 in bf16.
# Runtime: about an hour for 1,200 demos x 3 epochs.
#
# Every knob is an environment variable (these lines set only the paper's values that differ from
# run_alfworld_mistral_sft.sh's); extra arguments are appended to the swift command line, and a first
# argument --print-command prints that line instead of running it:
#
#   CUDA_VISIBLE_DEVICES=0 bash run_mistral_sft.sh
set -euo pipefail

# The paper's values are run_alfworld_mistral_sft.sh's defaults already.
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_alfworld_mistral_sft.sh" "$@"
