"""What the comparison's modules share (the run in :mod:`textwm.experiments.wm_comparison`, its Stage 2 in
:mod:`textwm.experiments.comparison_agents`, its report): the families, the regimes, the files, the error."""

FAMILIES = ("ar", "sdar", "wedlm")
REGIMES = ("scratch", "convert")
#: SDAR's block length, WeDLM's masking block (the demo's and the paper's settings for these sizes).
BLOCKS = {"ar": 4, "sdar": 4, "wedlm": 32}
#: Stage 2's files from the data folder: GRPO task rows, held-out task rows, gold demos.
AGENT_FILES = ("rl_train.jsonl", "rl_test.jsonl", "sft_train.jsonl")


class ComparisonError(RuntimeError):
    """A run that cannot go on as asked (the message says which arm, file or setting and why)."""
