"""A model family added with one line, ``register(AR_COPY)``, and the generic layers that pick it up.

``ar_copy`` is AR under another name: it reuses AR's objective, reference decoder and engine rows, and its
checkpoints say ``"diffusion": "ar_copy"`` in ``config.json`` (a family without model types of its own is
marked so). Nothing generic was copied or told about it: the tiny factory builds it, ``read_spec`` reads it,
the trainer trains it (and converts an AR checkpoint into it), the reference decoder and the static engine
decode it, the config checks and the training CLI accept it, the serving rules read it. Built from the same
seed as the tiny AR checkpoint it has the same weights, so every number must be AR's.
"""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

import textwm.models
from tests.conftest import TINY_CORPUS
from textwm.config import ConfigError
from textwm.generation.ar import ARDecoder
from textwm.generation.decoders import make_decoder, reference_decoder
from textwm.generation.engine import DecodeEngine
from textwm.generation.engine.ar_rows import ARRows
from textwm.generation.engine.families import rows_class
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model, read_spec
from textwm.models.families import DIFFUSION_FIELD, family_names, get_family, register, unregister
from textwm.models.tiny import build_tiny_checkpoint, tiny_config, tiny_families
from textwm.serving.launch import check_vllm_checkpoint
from textwm.training.cli import main as train_main
from textwm.training.config import SFTConfig
from textwm.training.trainer import train

AR_COPY = dataclasses.replace(get_family("ar"), name="ar_copy",
                              conversion_note="{path} is a {family} checkpoint: marked as {name}")


@pytest.fixture(scope="module", autouse=True)
def ar_copy_family():
    register(AR_COPY)
    yield AR_COPY
    unregister(AR_COPY.name)


@pytest.fixture(scope="module")
def ar_copy_dir(tmp_path_factory, ar_copy_family):
    """A tiny ar_copy checkpoint from the tiny AR checkpoint's corpus, vocabulary and seed."""
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ar_copy"), TINY_CORPUS, family="ar_copy",
                                 vocab_size=400, seed=2)


def _sft(model, train_file, out, **kw) -> SFTConfig:
    return SFTConfig(model_name_or_path=str(model), train_file=str(train_file), output_dir=str(out), cutoff_len=256,
                     learning_rate=1e-2, per_device_train_batch_size=2, max_steps=1, logging_steps=1, save_steps=1000,
                     lr_scheduler_type="constant", **kw)


def test_the_registry_lists_the_family_and_names_the_registered_ones_for_an_unknown_name():
    assert "ar_copy" in family_names() and get_family("ar_copy") is AR_COPY
    assert "ar_copy" in textwm.models.FAMILIES and "ar_copy" in tiny_families()
    with pytest.raises(KeyError, match="unknown model family 'nope'; registered: ar, ar_copy, sdar, wedlm"):
        get_family("nope")
    with pytest.raises(ValueError, match="named 'sdar' is registered already"):
        register(dataclasses.replace(AR_COPY, name="sdar"))
    with pytest.raises(ValueError, match="'ar' is a built-in model family"):
        unregister("ar")


def test_a_checkpoint_of_the_family_is_read_as_it_and_differs_from_ar_only_by_its_marker(ar_copy_dir, tiny_ar_dir):
    config = json.loads((ar_copy_dir / "config.json").read_text())
    spec = read_spec(ar_copy_dir)
    assert (config[DIFFUSION_FIELD], spec.family, spec.block_size, spec.mask_token_id) == ("ar_copy", "ar_copy",
                                                                                           None, None)
    assert read_spec(tiny_ar_dir).family == "ar"
    ours, ar = load_file(str(ar_copy_dir / "model.safetensors")), load_file(str(tiny_ar_dir / "model.safetensors"))
    assert ours.keys() == ar.keys() and all(torch.equal(ours[k], ar[k]) for k in ar)


def test_the_config_checks_and_the_tiny_factory_list_it(train_file, tmp_path, ar_copy_dir):
    assert _sft(ar_copy_dir, train_file, tmp_path, objective="ar_copy").objective == "ar_copy"
    with pytest.raises(ConfigError, match="objective must be one of ar, ar_copy, sdar, wedlm, got 'nope'"):
        _sft(ar_copy_dir, train_file, tmp_path, objective="nope")
    with pytest.raises(ValueError, match="family must be one of ar, ar_copy, sdar, sdar_moe, wedlm, got 'nope'"):
        tiny_config("tiny", vocab_size=64, family="nope")


def test_it_trains_a_step_as_ar_does(ar_copy_dir, tiny_ar_dir, train_file, tmp_path):
    ours = train(_sft(ar_copy_dir, train_file, tmp_path / "ours", objective="ar_copy"))
    ar = train(_sft(tiny_ar_dir, train_file, tmp_path / "ar", objective="ar"))
    assert ours.global_step == 1 and ours.train_loss > 0
    assert (ours.train_loss, ours.data_digest) == (ar.train_loss, ar.data_digest)
    assert read_spec(tmp_path / "ours").family == "ar_copy"
    trained, ar_trained = load_file(str(tmp_path / "ours" / "model.safetensors")), load_file(
        str(tmp_path / "ar" / "model.safetensors"))
    assert all(torch.equal(trained[k], ar_trained[k]) for k in ar_trained)


def test_the_training_cli_converts_an_ar_checkpoint_into_it(tiny_ar_dir, train_file, tmp_path, capsys):
    common = [f"model_name_or_path={tiny_ar_dir}", f"train_file={train_file}", "cutoff_len=256", "max_steps=1",
              "save_steps=1000", "per_device_train_batch_size=2"]
    assert train_main([*common, f"output_dir={tmp_path / 'out'}", "objective=ar_copy"]) == 0
    assert read_spec(tmp_path / "out").family == "ar_copy"
    assert train_main([*common, f"output_dir={tmp_path / 'bad'}", "objective=nope"]) == 2
    assert "objective must be one of ar, ar_copy, sdar, wedlm" in capsys.readouterr().err


def test_it_decodes_through_the_reference_decoder_and_the_engine_as_ar(ar_copy_dir, tiny_ar_dir):
    ours, ar = (load_model(path, device="cpu", dtype="float32") for path in (ar_copy_dir, tiny_ar_dir))
    for lm in (ours, ar):
        lm.model.double()   # the engine's attention and the reference's agree far inside any argmax margin
    assert ours.spec.family == "ar_copy" and rows_class(ours.spec) is ARRows
    decoder = reference_decoder(ours.model, ours.spec)
    assert isinstance(decoder, ARDecoder) and isinstance(make_decoder(ours.model, ours.spec), ARDecoder)
    prompts = [ours.tokenizer.encode(text)[:n] for text, n in zip(TINY_CORPUS, (5, 9, 3, 7))]
    settings = DecodeSettings(gen_length=8, temperature=0)
    want = [g.token_ids for g in reference_decoder(ar.model, ar.spec).generate(prompts, settings)]
    assert [g.token_ids for g in decoder.generate(prompts, settings)] == want
    engine = DecodeEngine(ours.model, ours.spec, max_rows=2, max_len=32)
    assert [g.token_ids for g in engine.generate(prompts, settings)] == want


def test_the_serving_rules_read_it(ar_copy_dir, tiny_sdar_dir):
    check_vllm_checkpoint(str(ar_copy_dir))   # unmasked: vLLM decodes it left to right
    with pytest.raises(ValueError, match="vLLM serves AR checkpoints only"):
        check_vllm_checkpoint(str(tiny_sdar_dir))
