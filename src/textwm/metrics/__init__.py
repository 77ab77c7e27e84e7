"""Scoring world-model predictions: normalisation, match, overlap, diversity, MAUVE, reports.

Submodules import their third-party dependencies lazily, so ``import textwm.metrics`` is cheap
and never pulls torch; ``textwm.metrics.scorer`` is the entry point for scoring.
"""
