"""Which row state decodes each model family, and the cache columns each needs past ``max_len``."""

from __future__ import annotations

from textwm.generation.engine.ar_rows import ARRows
from textwm.generation.engine.rows import MAX_BLOCK_OR_WINDOW, RowsContext
from textwm.generation.engine.sdar_rows import SDARRows
from textwm.generation.engine.wedlm_rows import WeDLMRows
from textwm.models.checkpoint import ModelSpec

__all__ = ["FAMILY_ROWS", "RowsContext", "capacity_slack"]

FAMILY_ROWS = {"ar": ARRows, "sdar": SDARRows, "wedlm": WeDLMRows}

def capacity_slack(spec: ModelSpec) -> int:
    """Columns past ``max_len`` a row may write: SDAR rounds its end up to a block and writes a padding block
    past it in a fused forward; WeDLM's forward writes up to 2 windows past the committed prefix."""
    return 0 if spec.family == "ar" else 3 * MAX_BLOCK_OR_WINDOW
