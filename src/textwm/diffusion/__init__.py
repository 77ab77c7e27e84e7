"""The block-diffusion maths, once: attention-mask rules, noise and masking, losses.

Training objectives (``textwm.training.objectives``) and decoders (``textwm.generation``) import
from here; nothing else re-implements a mask rule or a loss.
"""
