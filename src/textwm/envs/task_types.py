"""The agent-side rows (RL task rows, SFT demos) of some task types, for any env.

A world model learns every task type of its data; an agent at a small scale is trained and scored on the types
it can finish in its turn budget (ScienceWorld's lifespan tasks take 1-7 actions, its boil tasks 25-50). The demo
and the comparison both narrow their agent stages this way, with :func:`write_agent_files`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textwm.data.jsonl import DataError, read_jsonl, write_jsonl
from textwm.envs.contract import EnvSpec

#: The agent side of a dataset folder: task rows to train on (GRPO), held-out task rows, gold demos (SFT).
AGENT_FILES = ("rl_train.jsonl", "rl_test.jsonl", "sft_train.jsonl")


def rows_of_types(spec: EnvSpec, rows: Sequence[dict[str, Any]], types: Sequence[str], *,
                  source: str | Path) -> list[dict[str, Any]]:
    """The rows whose task type (``spec.family_of`` of the row's task id) is one of ``types``: grouped in the
    order of ``types``, each group in file order. A type with no row is a DataError naming ``source`` and the
    types it has (a typo must not leave an agent with nothing to learn); a row without a task id, one naming
    ``source`` and the row's line (rows are a file's lines in order)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for line, row in enumerate(rows, 1):
        try:
            task_id = spec.task_id_of(row)
        except DataError as err:
            raise DataError(err.message, path=source, line=line, field=err.field) from None
        by_type.setdefault(spec.family_of(task_id), []).append(row)
    missing = [t for t in types if t not in by_type]
    if missing:
        raise DataError(f"no row of task type {', '.join(missing)} (its task types: {', '.join(sorted(by_type))})",
                        path=source)
    return [row for t in types for row in by_type[t]]


def write_rows_of_types(spec: EnvSpec, source: Path, dest: Path, types: Sequence[str]) -> int:
    """Write :func:`rows_of_types` of the JSONL file ``source`` to ``dest`` (atomically); returns the row count."""
    rows = rows_of_types(spec, read_jsonl(source).rows, types, source=source)
    write_jsonl(dest, rows)
    return len(rows)


def write_agent_files(spec: EnvSpec, data_dir: Path, out_dir: Path, types: Sequence[str]) -> dict[str, int]:
    """:func:`write_rows_of_types` of each of :data:`AGENT_FILES` from ``data_dir`` into ``out_dir``; the row
    count of each file written."""
    return {name: write_rows_of_types(spec, data_dir / name, out_dir / name, types) for name in AGENT_FILES}
