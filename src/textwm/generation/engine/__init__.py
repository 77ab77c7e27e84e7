"""The static-shape decode engine (AR, SDAR, WeDLM): a preallocated KV cache, CUDA-graph decode forwards and
rows that requests join and leave (continuous batching). See :mod:`textwm.generation.engine.core`."""

from textwm.generation.engine.core import DecodeEngine, EngineFull, EngineStats, RowUpdate

__all__ = ["DecodeEngine", "EngineFull", "EngineStats", "RowUpdate"]
