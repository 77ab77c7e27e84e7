"""The whole stack on a tiny Llama model (SmolLM2's architecture: no q/k norms, no biases, tied embeddings).

One random Llama AR checkpoint and its SDAR and WeDLM conversions (``tiny_llama_dirs`` in conftest.py):
conversion, training with each objective, the reference decoders against the static engine (whose layers
run fused: Llama layers have no ``q_norm``/``k_norm`` at all), the native server, and the launch lines of
the other backends. The Qwen3 models get the same checks in the files the helpers come from.
"""

import json
import math

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import LlamaForCausalLM

from tests.conftest import LLAMA_BLOCK
from tests.generation.lmdeploy_reference import untie_head
from tests.generation.test_engine import LENGTHS, assert_engine_equals_reference
from tests.generation.wedlm_upstream import sharpen_head
from tests.serving.test_app import MSG, _engine
from tests.training.test_trainer import _config, _weights
from textwm.generation.engine.fused_layers import FusedLayers
from textwm.generation.engine.static_model import StaticModel
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import convert_to_block_diffusion, convert_to_wedlm, load_model, read_spec
from textwm.models.families import family_of
from textwm.models.tiny import build_tiny_model, tiny_config, train_tokenizer
from textwm.serving.app import create_app
from textwm.serving.launch import BackendSpec, server_command
from textwm.training.trainer import train

CONVERT = {"sdar": convert_to_block_diffusion, "wedlm": convert_to_wedlm}


def _causal(n: int) -> torch.Tensor:
    """The causal mask ``[1, 1, n, n]`` (bool), as the decoders pass masks."""
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]


@pytest.mark.parametrize("family", ["ar", "sdar", "wedlm"])
def test_tiny_llama_configs(family):
    tokenizer = train_tokenizer(["a b c d e f"] * 4, vocab_size=300, with_mask_token=family != "ar")
    model = build_tiny_model(tokenizer, family=family, arch="llama", block_size=4)
    config = model.config
    assert type(model) is LlamaForCausalLM and config.model_type == "llama"
    assert (config.attention_bias, config.mlp_bias, config.tie_word_embeddings) == (False, False, True)
    assert not hasattr(model.model.layers[0].self_attn, "q_norm")
    assert family_of(config.to_dict()) == family
    if family != "ar":
        assert (config.diffusion, config.block_size, config.mask_token_id) == (family, 4, tokenizer.mask_token_id)
    with pytest.raises(ValueError, match="sdar_moe is Qwen3-MoE"):
        tiny_config("tiny", vocab_size=300, family="sdar_moe", arch="llama", mask_token_id=3)
    with pytest.raises(ValueError, match="arch must be one of qwen3, llama"):
        tiny_config("tiny", vocab_size=300, arch="gpt2")


# --- conversion -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["sdar", "wedlm"])
def test_conversion_marks_the_family_and_keeps_the_ar_logits(family, tiny_llama_dirs):
    """On disk (``convert_checkpoint``, conftest.py) and in memory: the model stays a Llama, the config gains
    the diffusion fields, the logits gain a mask-token column only."""
    path = tiny_llama_dirs[family]
    spec = read_spec(path)
    config = json.loads((path / "config.json").read_text())
    assert (spec.family, spec.model_type, spec.block_size, config["diffusion"]) == (family, "llama", LLAMA_BLOCK, family)
    ar = load_model(tiny_llama_dirs["ar"], device="cpu", dtype="float32")
    after = load_model(path, device="cpu", dtype="float32")
    assert type(after.model) is LlamaForCausalLM
    vocab = ar.model.get_input_embeddings().weight.shape[0]
    assert spec.mask_token_id == after.tokenizer.mask_token_id == vocab          # one new embedding row
    ids = torch.tensor([[3, 14, 15, 9, 2, 65]])
    with torch.no_grad():
        want = ar.model(ids, attention_mask=_causal(6)).logits
        got = after.model(ids, attention_mask=_causal(6)).logits
    assert got.shape[-1] == vocab + 1
    torch.testing.assert_close(got[..., :vocab], want, rtol=1e-5, atol=1e-5)

    mask_id = CONVERT[family](ar.model, ar.tokenizer, LLAMA_BLOCK)               # the in-memory function
    assert type(ar.model) is LlamaForCausalLM and mask_id == spec.mask_token_id
    assert (family_of(ar.model.config.to_dict()), ar.model.config.block_size) == (family, LLAMA_BLOCK)


# --- training -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "objective"), [("ar", "ar"), ("ar", "sdar"), ("ar", "wedlm"), ("sdar", "ar")])
def test_each_objective_trains_the_llama_checkpoint(start, objective, tiny_llama_dirs, train_file, tmp_path):
    """The trainer converts the checkpoint to the objective's family (the AR one to SDAR and WeDLM, the SDAR
    one back to AR), saves a Llama of that family, and two steps change every weight."""
    start = tiny_llama_dirs[start]
    result = train(_config(start, train_file, tmp_path / "out", objective=objective, max_steps=2,
                           block_length=LLAMA_BLOCK))
    assert result.global_step == 2 and math.isfinite(result.train_loss) and result.train_loss > 0
    spec = read_spec(tmp_path / "out")
    assert (spec.family, spec.model_type) == (objective, "llama")
    before, after = _weights(start), _weights(tmp_path / "out")
    assert before.keys() == after.keys()
    unchanged = [k for k in before if torch.equal(before[k], after[k][:len(before[k])])]   # the mask row aside
    assert not unchanged


# --- decoding -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama(tiny_llama_dirs):
    """The three checkpoints in float64, with test_engine.py's heads for the diffusion ones (their tied random
    heads would mostly predict the mask token)."""
    heads = {"ar": lambda lm: lm, "sdar": untie_head, "wedlm": sharpen_head}
    loaded = {}
    for family, path in tiny_llama_dirs.items():
        lm = heads[family](load_model(path, device="cpu", dtype="float32"))
        lm.model.double()
        loaded[family] = lm
    return loaded


@pytest.fixture(scope="module")
def prompts(llama):
    gen = torch.Generator().manual_seed(0)
    vocab = len(llama["ar"].tokenizer)
    return [torch.randint(10, vocab, (n,), generator=gen).tolist() for n in (5, 12, 3, 17, 1)]


ENGINE_CASES = [
    pytest.param("ar", {}, id="ar"),
    pytest.param("ar", dict(repetition_penalty=1.5), id="ar-penalty"),
    pytest.param("sdar", dict(block_length=4, denoising_steps=2, confidence_threshold=0.3), id="sdar-generate"),
    pytest.param("sdar", dict(block_length=8, denoising_steps=3, remasking_strategy="entropy_bounded",
                              entropy_budget=1.5), id="sdar-entropy"),
    pytest.param("sdar", dict(sdar_rules="lmdeploy", block_length=8, denoising_steps=1, confidence_threshold=0.3),
                 id="sdar-lmdeploy"),
    pytest.param("wedlm", dict(window_size=4, entropy_threshold=0.4, position_penalty=0.02), id="wedlm-window4"),
    pytest.param("wedlm", dict(window_size=16, entropy_threshold=4.6), id="wedlm-window16"),
]


@pytest.mark.parametrize(("family", "case"), ENGINE_CASES)
def test_the_engine_decodes_as_the_reference_decoders(llama, prompts, family, case):
    """The reference decoder of each family produces text; the static engine (fused layers) the same tokens."""
    lm = llama[family]
    assert isinstance(StaticModel(lm.model, rows=1, capacity=8).layer_math, FusedLayers)
    got = assert_engine_equals_reference(lm, prompts, DecodeSettings(gen_length=11, temperature=0, **case),
                                         gen_lengths=LENGTHS[:len(prompts)], max_rows=2)   # rows refill
    assert sum(len(g.token_ids) for g in got) > len(prompts)
    assert all(lm.spec.mask_token_id not in g.token_ids for g in got)


# --- serving --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["ar", "sdar", "wedlm"])
def test_the_native_server_answers_a_chat_request(family, tiny_llama_dirs):
    engine = _engine(load_model(tiny_llama_dirs[family], device="cpu", dtype="float32"))
    with TestClient(create_app(engine)) as client:
        r = client.post("/v1/chat/completions", json={"model": "tiny-wm", "messages": MSG, "max_tokens": 6,
                                                       "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] > 0
        assert client.get("/v1/models").json()["data"][0]["family"] == family


def test_vllm_serves_the_ar_checkpoint_and_lmdeploy_and_vllm_refuse_the_diffusion_ones(tiny_llama_dirs):
    ar, sdar, wedlm = (str(tiny_llama_dirs[f]) for f in ("ar", "sdar", "wedlm"))
    assert server_command(BackendSpec(backend="vllm", model_path=ar))[:3] == ["vllm", "serve", ar]
    for path in (sdar, wedlm):
        with pytest.raises(ValueError, match=r"vLLM serves AR checkpoints only.*--backend native$"):
            server_command(BackendSpec(backend="vllm", model_path=path))
        with pytest.raises(ValueError, match=r"model type 'llama'; lmdeploy's dllm backend decodes only the SDAR "
                                             r"model types sdar and sdar_moe.*--backend native"):
            server_command(BackendSpec(backend="lmdeploy", model_path=path))
    assert server_command(BackendSpec(backend="native", model_path=sdar))[1:4] == ["-m", "textwm.serving", "server"]
