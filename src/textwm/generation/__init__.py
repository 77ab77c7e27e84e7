"""Generating world-model predictions: from a served endpoint (``api``) and with local decoders.

This package's ``__init__`` imports nothing heavy; decoders import torch in their own modules.
"""

#: SDAR remasking strategies (:mod:`textwm.generation.remasking`); here so CLIs list them without torch.
STRATEGIES = ("sequential", "low_confidence_static", "low_confidence_dynamic", "entropy_bounded")
#: SDAR decoding rules: ``generate`` (JetAstra/SDAR ``generate.py``) or ``lmdeploy`` (lmdeploy's dllm engine,
#: how the paper served its SDAR world models); see :mod:`textwm.generation.sdar`.
SDAR_RULES = ("generate", "lmdeploy")
#: Which implementation decodes (:func:`textwm.generation.decoders.make_decoder`): ``auto`` picks the static-shape
#: engine on CUDA and the reference decoders on CPU.
DECODER_ENGINES = ("auto", "static", "reference")
