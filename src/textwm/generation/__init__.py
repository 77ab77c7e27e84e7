"""Generating world-model predictions: from a served endpoint (``api``) and with local decoders.

This package's ``__init__`` imports nothing heavy; decoders import torch in their own modules.
"""
