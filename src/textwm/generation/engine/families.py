"""Which row state decodes each model family (its family's ``engine_rows``), and the cache columns it needs past
``max_len``."""

from __future__ import annotations

from textwm.generation.engine.rows import Rows, RowsContext
from textwm.models.checkpoint import ModelSpec
from textwm.models.families import family_names, get_family

__all__ = ["RowsContext", "capacity_slack", "rows_class"]


def rows_class(spec: ModelSpec) -> type[Rows]:
    """The row-state class of ``spec.family``.

    Raises:
        ValueError: no family of that name is registered.
    """
    if spec.family not in family_names():
        raise ValueError(f"no engine for family {spec.family!r}; choose one of {', '.join(family_names())}")
    return get_family(spec.family).rows_class()


def capacity_slack(spec: ModelSpec) -> int:
    """Columns past ``max_len`` a row of ``spec.family`` may write (:attr:`Rows.capacity_slack`)."""
    return rows_class(spec).capacity_slack
