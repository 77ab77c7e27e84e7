"""The AR family: any Hugging Face causal LM (Qwen3, Qwen2, Llama, ...), trained with next-token cross-entropy
and decoded left to right with a KV cache. The default family: a config that names no other is AR."""

from textwm.models.families.contract import ModelFamily

AR = ModelFamily(
    name="ar",
    objective="textwm.training.objectives:ARObjective",
    decoder="textwm.generation.ar:ARDecoder",
    engine_rows="textwm.generation.engine.ar_rows:ARRows",
    conversion_note="{path} is a {family} checkpoint trained here with the AR objective; checkpoints are saved as "
                    "a plain causal LM",
)
