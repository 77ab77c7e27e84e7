"""Reading a run folder's state.json in the tests of the pipelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def done_results(out: Path) -> dict[str, Any]:
    """The result of every stage done in ``out/state.json``, by stage name."""
    stages = json.loads((Path(out) / "state.json").read_text())["stages"]
    return {name: stage["result"] for name, stage in stages.items() if stage["status"] == "done"}
