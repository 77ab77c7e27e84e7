"""What every pipeline's ``report.md`` is written with: numbers formatted one way, markdown tables, charts drawn
headless (left out when matplotlib is missing), the stages and their wall time from the run's ``state.json``, and one
atomic write. Each pipeline's report module keeps only what it says (:mod:`textwm.demo_report`,
:mod:`textwm.experiments.comparison_report`, :mod:`textwm.experiments.pretrained_report`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from textwm.data.jsonl import atomic_write
from textwm.experiments.stages import DONE, StageRecord


def fmt(value: Any, *, digits: int = 4, missing: str = "—", whole_from: float | None = None) -> str:
    """A figure for a table: ``missing`` for None, a float with ``digits`` decimals; with ``whole_from``, integers and
    floats of at least that size as whole numbers with thousands separators (``12,345``); anything else as text."""
    if value is None:
        return missing
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if whole_from is not None and number and (isinstance(value, int) or abs(value) >= whole_from):
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table: the header, its rule, one line per row (cells as text)."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the headless backend, or None when matplotlib is not installed (the report is
    written without its charts)."""
    try:
        # optional and slow (~0.2 s): charts only; pyplot after use('Agg')
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def image(alt: str, path: Path | None) -> list[str]:
    """The markdown line of a chart beside ``report.md`` (none when the chart was not drawn)."""
    return [f"![{alt}]({Path(path).name})\n"] if path else []


def stage_times(records: Mapping[str, StageRecord]) -> list[str]:
    """The run's stages from its state: a table of each stage done and its seconds, with the total; a line naming any
    stage that failed and its error."""
    done = {name: r for name, r in records.items() if r.status == DONE}
    lines = table(["stage", "seconds"], [*((name, r.seconds) for name, r in done.items()),
                                         ("total", round(sum(r.seconds for r in done.values()), 1))])
    failed = [f"`{name}` ({r.error})" for name, r in records.items() if r.status != DONE]
    return [*lines, *([f"\nFailed in its last run: {'; '.join(failed)}."] if failed else []), ""]


def write_markdown(path: Path, lines: Iterable[str]) -> Path:
    """``lines`` as ``path`` (one file, written whole or not at all)."""
    text = "\n".join(lines)
    with atomic_write(path) as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return path
