"""Batched generation for WeDLM world models: streaming parallel decoding under causal attention.

Same flags and output rows as sdar/eval_generate.py (the decoder follows the checkpoint: WeDLM,
SDAR or AR), plus the WeDLM knobs --window-size (16), --entropy-threshold (0.4) and
--position-penalty (0.02); one default differs: --temperature is 0.2, Tencent/WeDLM's default
(``wedlm/sampling_params.py``; its own evaluation scripts pass 0, greedy). Tiny CPU run:
    python wedlm/eval_generate.py --model-path runs/tiny_wedlm_sft --data-dir data/samples \
        --file-pattern 'sciworld_wm_{name}.jsonl' --datasets test --output-dir runs/gen_wedlm \
        --num-gpus 0 --gen-length 32 --temperature 0
8 GPUs:
    python wedlm/eval_generate.py --model-path outputs/wedlm_sft --data-dir data --datasets test \
        --output-dir outputs/wedlm_eval --num-gpus 8 --per-batch 16
"""

from dataclasses import dataclass
from functools import partial

from textwm.config import option
from textwm.generation.cli import main
from textwm.generation.runner import EvalGenerateConfig
from textwm.generation.settings import DecodeSettings

#: Tencent/WeDLM's default sampling temperature (``wedlm/sampling_params.py`` ``SamplingParams.temperature``).
WEDLM_TEMPERATURE = 0.2


@dataclass
class WeDLMEvalGenerateConfig(EvalGenerateConfig):
    """Batched generation as ``sdar/eval_generate.py``, decoding at upstream WeDLM's default temperature."""

    decode: DecodeSettings = option(help="decoding", default_factory=partial(DecodeSettings,
                                                                             temperature=WEDLM_TEMPERATURE))


if __name__ == "__main__":
    raise SystemExit(main(prog="wedlm/eval_generate.py", description=__doc__, config_cls=WeDLMEvalGenerateConfig))
