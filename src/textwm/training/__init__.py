"""The SFT trainer for world models: one HF-Trainer-based trainer, objectives ``ar`` and ``sdar``."""
