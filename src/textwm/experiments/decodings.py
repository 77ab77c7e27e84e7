"""What the comparison measures on an arm's decodings besides the scorer's metrics: the within-prompt diversity
of several sampled decodings, the sampled passes' decode rate, the share of empty outputs. Used by every regime
(:mod:`textwm.experiments.wm_comparison`, :mod:`textwm.experiments.pretrained_regime`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textwm.data.text import normalize
from textwm.metrics.diversity import distinct_n, self_bleu
from textwm.metrics.scorer import ERROR_PREFIX, read_predictions


def sampled_diversity(prediction_files: list[Path]) -> dict[str, Any]:
    """Within-prompt diversity of several sampled decodings of the same prompts (one file per sample).

    Self-BLEU among each prompt's samples (leave-one-out, the scorer's definition), mean over prompts;
    Distinct-1/2 over every sample of every prompt (the normalised texts the scorer scores)."""

    by_prompt: dict[str, list[str]] = {}
    errors = 0
    for path in prediction_files:
        rows, _ = read_predictions(path)
        for row in rows:
            if row.prediction.startswith(ERROR_PREFIX) or row.is_overlong:
                errors += 1
                continue
            by_prompt.setdefault(json.dumps(row.index), []).append(normalize(row.prediction))
    scores = [s for preds in by_prompt.values() if len(preds) > 1 for s in [self_bleu(preds)[0]] if s is not None]
    everything = [p for preds in by_prompt.values() for p in preds]
    return {"samples_per_prompt": len(prediction_files), "prompts": len(by_prompt), "dropped_samples": errors,
            "self_bleu_within_prompt": round(sum(scores) / len(scores), 4) if scores else None,
            "distinct_1_samples": distinct_n(everything, 1), "distinct_2_samples": distinct_n(everything, 2)}


def sampled_decode_rate(pass_folders: list[Path]) -> float | None:
    """Tokens per second of the sampled passes' decoding loops together. The greedy pass goes first in its call
    (:meth:`Comparison.generate_arm`), so on a GPU its loop also pays for the decoder's warm-up (CUDA graph
    capture for each batch shape); the sampled passes after it show the warm decoder's speed."""
    summaries = [json.loads((folder / "eval_generate_config.json").read_text()) for folder in pass_folders]
    seconds = sum(s["decode_seconds"] for s in summaries)
    return round(sum(s["generated_tokens"] for s in summaries) / seconds, 1) if seconds > 0 else None


def empty_share(prediction_file: Path) -> float:
    """Share of a decoding's predictions that are empty once normalised (an untrained diffusion model often
    stops at once: its 'diversity' is then no diversity, and the report says so)."""

    rows, _ = read_predictions(prediction_file)
    return round(sum(not normalize(r.prediction).strip() for r in rows) / max(len(rows), 1), 4)
