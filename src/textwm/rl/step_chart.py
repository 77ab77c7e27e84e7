"""The per-step chart of GRPO runs: each run's reward, share of groups with no reward spread, token entropy and KL
to the start per optimizer step (:func:`textwm.rl.in_wm.step_records`), and, where measured, its agents' real
success on a calibration set over the run.

    steps_chart([GRPOCurves("grpo_real", record["steps"], calibration_points)], Path("stage2_steps.png"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The per-step curves charted: (key in a step record, title).
STEP_CURVES = (("reward", "mean reward"), ("zero_spread", "groups with no reward spread"), ("entropy", "token entropy"),
               ("kl", "KL to the start"))


@dataclass(frozen=True)
class GRPOCurves:
    """One run's curves: its step records and the calibration points (``{"step", "success_rate"}``) if any."""

    label: str
    steps: Sequence[dict[str, Any]]
    calibration: Sequence[dict[str, Any]] = field(default_factory=tuple)


def steps_chart(runs: Sequence[GRPOCurves], path: Path) -> Path | None:
    """Write the chart of ``runs`` to ``path``; None when matplotlib is missing or no run has a step."""
    runs = [r for r in runs if r.steps]
    if not runs:
        return None
    try:
        import matplotlib  # optional (metrics extra) and heavy (~0.2 s): only drawing needs it
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): the backend is set before pyplot loads

    fig, axes = plt.subplots(1, len(STEP_CURVES) + 1, figsize=(4 * (len(STEP_CURVES) + 1), 3.4))
    for i, run in enumerate(runs):
        for ax, (key, title) in zip(axes, STEP_CURVES):
            points = [(s["step"], s[key]) for s in run.steps if s.get(key) is not None]
            if points:
                ax.plot(*zip(*points), color=f"C{i}", label=run.label, linewidth=1)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("step", fontsize=8)
        if run.calibration:
            axes[-1].plot([p["step"] for p in run.calibration], [p["success_rate"] for p in run.calibration],
                          marker="o", color=f"C{i}", label=run.label)
    axes[-1].set_title("real success, calibration rows", fontsize=9)
    axes[-1].set_xlabel("step", fontsize=8)
    axes[-1].set_ylim(0, 1)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
