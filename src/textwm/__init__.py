"""textwm: text world models for agent RL.

Stage 1 trains and scores world models (AR, SDAR block diffusion, WeDLM) on chat-format
environment transitions; stage 2 trains agents with GRPO inside those world models.
The package root imports nothing heavy: torch, transformers and the env packages are
imported by the submodules that need them.
"""

__version__ = "0.1.0"
