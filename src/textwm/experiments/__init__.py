"""Experiments that answer a question end to end with the library's own stages (train, generate, score, report).

- :mod:`textwm.experiments.wm_comparison`: AR vs SDAR vs WeDLM world models at equal size, rows and steps
  (``scripts/wm_comparison.py``).
"""
