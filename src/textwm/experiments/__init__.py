"""Experiments that answer a question end to end with the library's own stages (train, generate, score, report).

- :mod:`textwm.experiments.wm_comparison`: AR vs SDAR vs WeDLM world models at equal size, rows and steps
  (``scripts/wm_comparison.py``).
- What it shares with the demo (:mod:`textwm.demo`): :mod:`textwm.experiments.stages` (the stage runner and its
  ``state.json``), :mod:`textwm.experiments.run_config` (the settings of both), :mod:`textwm.experiments.report_writer`
  (what both reports are written with).
"""
