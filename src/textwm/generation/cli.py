"""Command line of batched world-model generation (``sdar/eval_generate.py``, ``wedlm/eval_generate.py``).

Besides the config's flags (:class:`~textwm.generation.runner.EvalGenerateConfig`, with the paper's spellings
as aliases), a script accepts the paper's flags that have no meaning here (:class:`NoOpFlag`): each is taken
with its value and named in a one-line notice on stderr, so the paper's command lines run unchanged.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textwm.config import ConfigCLI
from textwm.data.jsonl import DataError
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.generation.runner import EvalGenerateConfig, run
from textwm.models.checkpoint import CheckpointError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NoOpFlag:
    """A flag of the paper's script that is accepted and ignored here; ``why`` says why it is not needed."""

    flag: str
    metavar: str
    why: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


#: The paper's ``sdar/eval_generate.py --sdar-dir`` (required there): its workers import JetAstra/SDAR's
#: ``generate.py`` from that checkout.
SDAR_DIR = NoOpFlag("--sdar-dir", "DIR", "the paper's script imports SDAR's generate.py from this checkout; "
                                         "the SDAR decoder here is textwm's own, so no SDAR clone is needed")
#: The paper's ``wedlm/eval_generate.py --gpu-memory-utilization`` (0.9): passed to Tencent/WeDLM's ``LLM``.
GPU_MEMORY_UTILIZATION = NoOpFlag("--gpu-memory-utilization", "FRACTION",
                                  "a WeDLM/vLLM engine knob (the share of GPU memory its KV cache pre-allocates); "
                                  "the decoders here allocate their caches per batch")


def main(argv: list[str] | None = None, *, prog: str | None = None, description: str = "",
         config_cls: type | None = None, noop_flags: Sequence[NoOpFlag] = ()) -> int:
    """Parse, generate, print one line per dataset; 2 on a bad flag, input or checkpoint.

    ``config_cls``: an :class:`EvalGenerateConfig` subclass with other defaults (``wedlm/eval_generate.py``'s
    :class:`WeDLMEvalGenerateConfig`); default the class itself. ``noop_flags``: the paper's flags this script
    accepts and ignores with a notice (:data:`SDAR_DIR`, :data:`GPU_MEMORY_UTILIZATION`).
    """

    cli = ConfigCLI(config_cls or EvalGenerateConfig, prog=prog, description=description)
    for noop in noop_flags:
        cli.add_argument(noop.flag, metavar=noop.metavar, default=None,
                         help=f"the paper's flag, accepted and ignored: {noop.why}".replace("%", "%%"))
    parsed = cli.parse_or_report(argv)
    if parsed is None:
        return 2
    config, extra = parsed
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noop in noop_flags:
        _notice(noop, getattr(extra, noop.dest))


    try:
        stats = run(config)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, s in stats.items():
        print(_summary_line(name, s, counts_overlong=config.max_model_len is not None))
    return 0


def _notice(noop: NoOpFlag, value: Any) -> None:
    """One stderr line for a given no-op flag (nothing when it was not given)."""
    if value is not None:
        log.warning("%s %s ignored: %s", noop.flag, value, noop.why)


def _summary_line(name: str, stats: dict[str, Any], *, counts_overlong: bool) -> str:
    """``<name>: N rows -> <file> (E ERROR rows)``, plus the SKIPPED_OVERLONG count under ``--max-model-len``."""

    line = f"{name}: {stats['rows']} rows -> {stats['output']} ({stats['errors']} ERROR rows)"
    if counts_overlong:
        line += f" ({stats['skipped_overlong']} {SKIPPED_OVERLONG} rows)"
    return line
