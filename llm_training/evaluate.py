"""Score AR world-model predictions, optionally generating them first from an OpenAI-compatible endpoint.

Score existing predictions (same flags as sdar/ and wedlm/evaluate.py):
    python llm_training/evaluate.py --input-dir data/samples/predictions --datasets copy_state \
        --output-dir /tmp/scores
Generate from a served model (vLLM, lmdeploy, the native server), then score:
    python llm_training/evaluate.py --api-url http://localhost:8000/v1/chat/completions \
        --data-dir ./data --datasets test --output-dir ./output/eval_results
"""

from textwm.generation.api import ApiPredictions
from textwm.metrics.cli import main

if __name__ == "__main__":
    raise SystemExit(main(predictions=ApiPredictions(), prog="llm_training/evaluate.py"))
