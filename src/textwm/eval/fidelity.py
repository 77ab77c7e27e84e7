"""World-model fidelity after Word2World (arXiv 2512.18832).

* **Single-step, teacher-forced**: the WM predicts the next observation of held-out *real*
  transitions (chat rows, last message = the real observation) from their true history; the
  predictions go through the one scorer (:mod:`textwm.metrics.scorer`: exact match, ROUGE-L, ...,
  MAUVE when asked). Predictions come from an OpenAI-compatible endpoint
  (:func:`textwm.generation.api.generate_file`) or a local checkpoint (:mod:`textwm.generation.runner`).
* **Closed loop**: success rates of one agent Real (in the real env), WM (in the WM), W2R (the
  actions it chose in the WM, replayed in the real env), and CR = W2R / Real. CR is undefined
  (``null`` with a note) when Real is 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from textwm.clients.openai import ChatRequestError, resolve_model_id
from textwm.data.jsonl import read_jsonl, write_jsonl
from textwm.data.schema import validate_target_row
from textwm.eval.episodes import fmt, fmt_ci
from textwm.generation.api import ApiGenerationConfig, generate_file
from textwm.generation.runner import EvalGenerateConfig, run
from textwm.generation.settings import DecodeSettings
from textwm.metrics import report
from textwm.metrics.mauve import DEFAULT_FEATURIZER
from textwm.metrics.scorer import ScoreOptions, score_file

log = logging.getLogger(__name__)

SINGLE_STEP_DIR = "single_step"
DEFINITIONS = {
    "success": "an episode whose final score is 100",
    "real": "success rate of the agent in the real env",
    "wm": "success rate of the agent in the world model (score from the trajectory's goal milestones)",
    "w2r": "success rate of the WM episodes' actions replayed in the real env (same task, in order)",
    "cr": "W2R / Real (null when Real is 0)",
    "single_step": "teacher-forced next-observation prediction on held-out real transitions, scored by "
                   "textwm.metrics.scorer",
}


class FidelityError(RuntimeError):
    """Single-step fidelity cannot be computed (endpoint unreachable, every prediction failed)."""


def _greedy_observation() -> DecodeSettings:
    return DecodeSettings(gen_length=256, temperature=0.0)


@dataclass(frozen=True)
class CheckpointWM:
    """A local WM checkpoint (AR, SDAR or WeDLM), decoded by :mod:`textwm.generation.runner`."""

    path: str
    decode: DecodeSettings = field(default_factory=_greedy_observation)
    per_batch: int = 8
    #: GPUs (one model copy each); 0, or no CUDA, decodes on the CPU in-process.
    num_gpus: int = 1
    prompt_truncate: int = 8000


def _generate_endpoint(name: str, data: Path, outputs: Path, wm: ApiGenerationConfig) -> tuple[int, dict[str, Any]]:
    try:  # resolved here so that an unreachable endpoint is one clear error, not a file of ERROR rows
        model = wm.model or asyncio.run(resolve_model_id(wm.api_url, api_key=wm.api_key))
    except ChatRequestError as exc:
        raise FidelityError(f"WM endpoint {wm.api_url} is not reachable: {exc}") from None
    rep = generate_file(name, data, outputs, replace(wm, model=model))
    return rep.failed, {"kind": "endpoint", "url": wm.api_url, "model": rep.model, "max_tokens": wm.max_tokens,
                        "temperature": wm.temperature}


def _generate_checkpoint(name: str, data: Path, out: Path, wm: CheckpointWM) -> tuple[int, dict[str, Any]]:
    config = EvalGenerateConfig(model_path=wm.path, data_dir=str(data.parent), datasets=[name], output_dir=str(out),
                                file_pattern=f"{{name}}{data.suffix}", num_gpus=wm.num_gpus, per_batch=wm.per_batch,
                                prompt_truncate=wm.prompt_truncate, decode=wm.decode)
    stats = run(config)
    return stats[name]["errors"], {"kind": "checkpoint", **asdict(wm)}


def _exact_match_by(rows: list[dict[str, Any]], scored: Path, key: str) -> dict[str, dict[str, Any]] | None:
    """EM per value of a transition field (``source``: gold / explore kinds; ``task``), joined on the scorer's
    per-row ``match`` by row index. None when the rows do not carry ``key``."""
    if not any(key in r for r in rows):
        return None
    hits: dict[str, list[bool]] = defaultdict(list)
    for rec in read_jsonl(scored, allow_empty=True).rows:
        hits[str(rows[rec["index"]].get(key))].append(bool(rec["match"]))
    return {k: {"num_samples": len(v), "exact_match": sum(v) / len(v)} for k, v in sorted(hits.items())}


def wm_fidelity_single_step(transitions: str | Path, output_dir: str | Path, wm: ApiGenerationConfig | CheckpointWM, *,
                            mauve: bool = False, mauve_featurizer: str | None = None,
                            limit: int | None = None) -> dict[str, Any]:
    """Teacher-forced single-step scores of ``wm`` on held-out real transitions.

    Writes into ``<output_dir>/single_step/``: ``<name>_outputs.jsonl`` (predictions), ``<name>_scored.jsonl``,
    ``eval_summary.json``/``.md``/``.png`` (the scorer's report, comparable with ``--compare``).

    Args:
        transitions: chat JSONL (e.g. ``wm_test.jsonl`` of ``sciworld/build_wm_dataset.py``); the last
            message of each row is the real observation.
        limit: score the first ``limit`` rows only.

    Returns:
        ``{"dataset", "rows", "generator", "failed_requests", "summary" (the scorer's keys), "exact_match_by_source",
        "exact_match_by_task", "files"}``.
    """

    transitions = Path(transitions)
    rows = read_jsonl(transitions, validate=validate_target_row).rows  # a bad row fails before any generation
    name = transitions.stem
    out = Path(output_dir) / SINGLE_STEP_DIR
    out.mkdir(parents=True, exist_ok=True)
    data = transitions
    if limit is not None and limit < len(rows):
        rows = rows[:limit]
        data = out / f"{name}{transitions.suffix}"
        write_jsonl(data, rows)
    outputs = out / f"{name}_outputs.jsonl"
    if isinstance(wm, ApiGenerationConfig):
        failed, generator = _generate_endpoint(name, data, outputs, wm)
    else:
        failed, generator = _generate_checkpoint(name, data, out, wm)
    if failed == len(rows):
        raise FidelityError(f"every one of the {len(rows)} single-step predictions failed; see the ERROR rows in "
                            f"{outputs}")
    if failed:
        log.warning("%d of %d single-step predictions failed (ERROR rows, dropped and counted by the scorer)",
                    failed, len(rows))
    options = ScoreOptions(compute_mauve=mauve, mauve_featurizer=mauve_featurizer or DEFAULT_FEATURIZER)
    summary = score_file(name, outputs, out, options)
    paths = report.write_report({name: summary}, out, title="World-model single-step fidelity (teacher-forced)")
    scored = out / f"{name}_scored.jsonl"
    return {"dataset": name, "transitions": str(transitions), "rows": len(rows), "generator": generator,
            "failed_requests": failed, "summary": summary,
            "exact_match_by_source": _exact_match_by(rows, scored, "source"),
            "exact_match_by_task": _exact_match_by(rows, scored, "task"),
            "files": {"outputs": str(outputs), "scored": str(scored), **{k: str(v) for k, v in paths.items()}}}


# --- closed loop ----------------------------------------------------------------------------------


def success_ratio(w2r_rate: float | None, real_rate: float | None) -> tuple[float | None, str | None]:
    """CR = W2R / Real, or ``(None, why)`` when it is undefined."""
    if w2r_rate is None or real_rate is None:
        return None, "no episodes"
    if real_rate == 0:
        return None, "Real success rate is 0, so CR = W2R / Real is undefined"
    return w2r_rate / real_rate, None


def _rates(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary.get(k) for k in ("episodes", "successes", "success_rate", "success_ci95", "mean_score")}


def closed_loop_fidelity(real: dict[str, Any], wm: dict[str, Any], w2r: dict[str, Any]) -> dict[str, Any]:
    """Real / WM / W2R success rates with counts, and CR, overall and per task, from three episode summaries
    (:func:`textwm.eval.episodes.summarize`)."""
    cr, note = success_ratio(w2r["success_rate"], real["success_rate"])
    per_task = {}
    for task in sorted(set(real["per_task"]) | set(wm["per_task"]) | set(w2r["per_task"])):
        blocks = {mode: s["per_task"].get(task, {"episodes": 0, "successes": 0, "success_rate": None,
                                                 "mean_score": None})
                  for mode, s in (("real", real), ("wm", wm), ("w2r", w2r))}
        task_cr, task_note = success_ratio(blocks["w2r"]["success_rate"], blocks["real"]["success_rate"])
        per_task[task] = {**blocks, "cr": task_cr, "cr_note": task_note}
    return {"real": _rates(real), "wm": {**_rates(wm), "wm_errors": wm.get("wm_errors", 0)}, "w2r": _rates(w2r),
            "cr": cr, "cr_note": note, "per_task": per_task, "definitions": DEFINITIONS}


def closed_loop_markdown(fidelity: dict[str, Any]) -> str:
    lines = ["| | episodes | successes | success rate | 95% interval (Wilson) | mean score |",
             "|---|---|---|---|---|---|"]
    for mode, label in (("real", "Real"), ("wm", "WM"), ("w2r", "W2R")):
        b = fidelity[mode]
        lines.append(f"| {label} | {b['episodes']} | {b['successes']} | {fmt(b['success_rate'])} | "
                     f"{fmt_ci(b.get('success_ci95'))} | {fmt(b['mean_score'])} |")
    lines += ["", f"**CR = W2R / Real = {fmt(fidelity['cr'])}**" + (f" ({fidelity['cr_note']})"
                                                                    if fidelity["cr_note"] else ""), "",
              "| task | Real | WM | W2R | CR |", "|---|---|---|---|---|"]
    for task, t in fidelity["per_task"].items():
        cells = [f"{fmt(t[m]['success_rate'])} ({t[m]['successes']}/{t[m]['episodes']})" for m in ("real", "wm", "w2r")]
        lines.append(f"| {task} | {' | '.join(cells)} | {fmt(t['cr'])} |")
    return "\n".join(lines) + "\n"
