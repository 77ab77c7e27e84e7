"""Marker strings that generation writes in place of a prediction, shared by the generator and the scorer.

Kept in one torch-free module so that ``textwm.generation.runner`` (which writes them) and
``textwm.metrics.scorer`` (which drops the rows carrying them) import the same constant.
"""

#: The prediction of a row whose prompt was too long to generate: the paper's ``wedlm/eval_generate.py``
#: writes it (with ``skipped_overlong: true``) for every prompt of more than
#: ``max_model_len - max_output_tokens - 64`` tokens instead of decoding it.
SKIPPED_OVERLONG = "SKIPPED_OVERLONG"
