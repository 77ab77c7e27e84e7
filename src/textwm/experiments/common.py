"""What the comparison's modules share (the run in :mod:`textwm.experiments.wm_comparison`, its Stage 2 in
:mod:`textwm.experiments.comparison_agents`, its report): the families, the regimes, the files, the error."""

from textwm.envs.task_types import AGENT_FILES  # Stage 2's files from the data folder
from textwm.models.families import family_names

#: The world-model families compared: the registry's (:mod:`textwm.models.families`).
FAMILIES = tuple(family_names())
#: ``scratch``: random inits; ``convert``: an AR head start converted to each family; ``pretrained``: a pretrained
#: AR start (``ComparisonConfig.init``) fine-tuned, or converted and fine-tuned, epoch by epoch.
REGIMES = ("scratch", "convert", "pretrained")
#: The regimes of random-init runs (the default).
RANDOM_INIT_REGIMES = ("scratch", "convert")
#: SDAR's block length, WeDLM's masking block (the demo's and the paper's settings for these sizes).
BLOCKS = {"ar": 4, "sdar": 4, "wedlm": 32}

__all__ = ["AGENT_FILES", "BLOCKS", "FAMILIES", "RANDOM_INIT_REGIMES", "REGIMES", "ComparisonError"]


class ComparisonError(RuntimeError):
    """A run that cannot go on as asked (the message says which arm, file or setting and why)."""
