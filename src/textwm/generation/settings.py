"""The decoding knobs of every decoder (AR, SDAR, WeDLM), torch-free so that configs and CLIs can carry them.

One :class:`DecodeSettings` object is carried by the eval-generation config, the WM server's config,
the WM-stack launcher's backend spec and the local agent; its fields become their flags
(:mod:`textwm.config` flattens it), so no entry point declares them again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from textwm.config import option
from textwm.generation import SDAR_RULES, STRATEGIES

#: The knobs a decode-engine row takes from its own request (vLLM / lmdeploy per-request sampling params).
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")
#: The smallest sampling temperature (vLLM's ``_SAMPLING_EPS``): logits divided by less overflow float32 to inf and
#: the row's distribution to NaN. Greedy is 0.
MIN_TEMPERATURE = 1e-5
#: The repetition penalty's range: a logit divided or multiplied by a factor outside it can overflow to inf.
REPETITION_PENALTY_RANGE = (0.01, 100.0)


@dataclass(frozen=True)
class DecodeSettings:
    """Decoding knobs shared by the decoders (AR ignores the diffusion ones, SDAR the WeDLM ones)."""

    gen_length: int = option(1024, "max new tokens")
    temperature: float = option(1.0, "sampling temperature; 0 = greedy")
    top_k: int = option(0, "top-k sampling; 0 = off")
    top_p: float = option(1.0, "nucleus sampling")
    block_length: int = option(4, "SDAR block length; divides the model's block_size")
    denoising_steps: int = option(4, "SDAR denoising steps per block")
    remasking_strategy: str = option("low_confidence_dynamic", "SDAR: which masks a step fills", choices=STRATEGIES)
    confidence_threshold: float = option(0.85, "SDAR low_confidence_dynamic: fill every mask above this confidence")
    entropy_budget: float = option(0.5, "SDAR entropy_bounded: entropy budget per step in nats")
    sdar_rules: str = option("generate", "SDAR decoding rules: generate (JetAstra/SDAR generate.py) or lmdeploy "
                                         "(lmdeploy's dllm engine, as the paper served its WMs)", choices=SDAR_RULES)
    repetition_penalty: float = option(1.0, ">1 discourages tokens already in the prompt or the output (1: off)")
    seed: int | None = option(None, "sampling seed (none: unseeded)")
    window_size: int = option(16, "WeDLM: slots decoded in parallel after the committed prefix")
    entropy_threshold: float = option(0.4, "WeDLM: fill a mask when its raw-logit entropy + position_penalty * "
                                           "distance < this (else the lowest)")
    position_penalty: float = option(0.02, "WeDLM: entropy penalty per slot after the first mask")

    def batch_key(self) -> DecodeSettings:
        """What rows of one reference-decoder ``generate`` call share: every setting but ``gen_length`` (each row
        has its own). The batch scheduler groups requests by it."""
        return dataclasses.replace(self, gen_length=1)

    def step_key(self) -> DecodeSettings:
        """What rows decoding together in the decode engine share: the structure of a step (the diffusion
        settings, the SDAR rules, the seed), not the per-row sampling knobs (:data:`SAMPLING_FIELDS`) nor
        ``gen_length``. Rows with equal step keys may run in one engine step, each sampling by its own settings
        (``DecodeEngine.compatible`` adds that seeded rows share one generator, so need equal batch keys)."""
        return dataclasses.replace(self, gen_length=1, **{f: _SAMPLING_DEFAULTS[f] for f in SAMPLING_FIELDS})

    def __post_init__(self) -> None:
        if self.gen_length < 1:
            raise ValueError(f"gen_length must be >= 1, got {self.gen_length}")
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature < float("inf")):
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g} (smaller ones overflow "
                             f"the sampling), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.block_length < 1 or self.denoising_steps < 1:
            raise ValueError(f"block_length and denoising_steps must be >= 1, got {self.block_length} and "
                             f"{self.denoising_steps}")
        low, high = REPETITION_PENALTY_RANGE
        if not low <= self.repetition_penalty <= high:
            raise ValueError(f"repetition_penalty must be in [{low:g}, {high:g}] (1: off), got {self.repetition_penalty}")
        if self.window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {self.window_size}")
        if self.entropy_threshold < 0 or self.position_penalty < 0:
            raise ValueError("entropy_threshold and position_penalty must be >= 0, got "
                             f"{self.entropy_threshold} and {self.position_penalty}")
        if self.sdar_rules not in SDAR_RULES:
            raise ValueError(f"unknown SDAR rules {self.sdar_rules!r}; choose one of {', '.join(SDAR_RULES)}")
        if self.remasking_strategy not in STRATEGIES:
            raise ValueError(f"unknown remasking strategy {self.remasking_strategy!r}; "
                             f"choose one of {', '.join(STRATEGIES)}")


_SAMPLING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecodeSettings) if f.name in SAMPLING_FIELDS}
