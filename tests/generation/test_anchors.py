"""Anchored answers: templates checked, every anchor honoured by the SDAR and AR reference decoders."""

import random

import pytest
import torch

from textwm.generation.anchors import TemplateError, lay_out, parse_template, slots_of
from textwm.generation.ar import ARDecoder
from textwm.generation.sdar import SDARDecoder
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import WeDLMDecoder
from textwm.models.checkpoint import load_model

WORDS = ["You arrive at the countertop 1.", " On it, you see", " a mug 1", ", and", " nothing", ".", " The door",
         " is open", "\n\tthe agent", " (containing water)"]


@pytest.mark.parametrize(("raw", "max_tokens", "message"), [
    ([], None, "non-empty list"),
    ("You see", None, "non-empty list"),
    (["You see ", ""], None, r"response_template\[1\] is an empty string"),
    (["You see "], None, "has no slot"),
    (["a", {"fill": 0}], None, r"\[1\]: fill must be a positive integer, got 0"),
    (["a", {"fill": -3}], None, "positive integer"),
    (["a", {"fill": 2.5}], None, "positive integer"),
    (["a", {"fill": True}], None, "positive integer"),
    (["a", {"fill": 3, "text": "x"}], None, r"\[1\] has unknown keys \['text'\]"),
    ([{"fill": None}, "a", {"fill": 2}], None, r"\[0\] leaves out its size; only the last slot may"),
    (["a", {"fill": 2}, {"fill": 3}], None, r"\[2\] follows another slot"),
    (["a", 7], None, r"\[1\] must be a string or"),
    (["a", {"fill": 10}, "b", {"fill": 10}], 16, "need 20 tokens, more than max_tokens=16"),
    (["a", {"fill": 16}, "b", {}], 16, "need 16 tokens and more, more than max_tokens=16"),
])
def test_bad_templates_are_refused_naming_the_item(raw, max_tokens, message):
    with pytest.raises(TemplateError, match=message):
        parse_template(raw, max_tokens=max_tokens)


def test_a_layout_places_anchors_and_sizes_slots():
    template = parse_template(["ab", {"fill": 3}, "c", {}], max_tokens=8)
    layout = lay_out(template, lambda text: [ord(ch) for ch in text], budget=8)
    assert layout.fixed == [97, 98, None, None, None, 99, None, None, None, None, None]
    assert layout.spans == [(0, 2), (2, 5), (5, 6), (6, 11)] and layout.open_from == 6
    # Slot content ends at its first stop id; an open slot that fills its width ends by length.
    assert slots_of(layout, [97, 98, 5, 0, 7, 99, 1, 2, 3, 4, 6], stop_ids=[0]) == ([[5], [1, 2, 3, 4, 6]], "length")
    assert slots_of(layout, [97, 98, 5, 6, 7, 99, 1, 0], stop_ids=[0]) == ([[5, 6, 7], [1]], "stop")


def random_template(rng, max_tokens=24):
    parts, budget = [], max_tokens
    if rng.random() < 0.5:
        parts.append(rng.choice(WORDS))
    for _ in range(rng.randint(1, 3)):
        size = rng.randint(1, 5)
        budget -= size
        parts += [{"fill": size}, rng.choice(WORDS)]
    if rng.random() < 0.5:
        parts.append({})
    return parts


DECODERS = {"sdar": SDARDecoder, "wedlm": WeDLMDecoder, "ar": ARDecoder}


@pytest.fixture(scope="module", params=sorted(DECODERS))
def family(request, tiny_sdar_dir, tiny_wedlm_dir, tiny_ar_dir):
    path = {"sdar": tiny_sdar_dir, "wedlm": tiny_wedlm_dir, "ar": tiny_ar_dir}[request.param]
    loaded = load_model(path, device="cpu", dtype="float32")
    return request.param, loaded, DECODERS[request.param](loaded.model, loaded.spec)


def encode(tokenizer):
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_anchor_is_kept_byte_for_byte_in_order(family, temperature):
    name, loaded, decoder = family
    tok = loaded.tokenizer
    rng = random.Random(7)
    prompts = [tok.encode(text) for text in ("State: kitchen\n\nAction: look", "go to hallway", "x")] * 3
    templates = [parse_template(random_template(rng), max_tokens=24) for _ in prompts]
    layouts = [lay_out(t, encode(tok), budget=24) for t in templates]
    settings = DecodeSettings(gen_length=24, temperature=temperature, block_length=4, denoising_steps=2, seed=3,
                              window_size=8)
    answers = decoder.generate_anchored(prompts, layouts, settings, tok.decode)
    for template, got in zip(templates, answers):
        # The fixed strings stand verbatim and in order, the slots' decoded text between them.
        filled = iter(got.slot_token_ids)
        expected = "".join(p if isinstance(p, str) else tok.decode(next(filled)) for p in template.parts)
        assert got.text == expected
        assert all(len(slot) <= (size or 24) for slot, size in zip(got.slot_token_ids, template.slots))
        assert got.completion_tokens == sum(len(s) for s in got.slot_token_ids)
        assert not set(loaded.spec.stop_ids) & {t for s in got.slot_token_ids for t in s}
        if name == "sdar":     # (WeDLM, as upstream, does not ban the mask token)
            assert loaded.spec.mask_token_id not in {t for s in got.slot_token_ids for t in s}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_diffusion_decoder_never_overwrites_an_anchor_token(family, temperature):
    """The decoded canvas holds every anchor token at its position (the AR decoder has no canvas)."""
    name, loaded, decoder = family
    if name == "ar":
        pytest.skip("the canvas is the diffusion decoders'")
    tok = loaded.tokenizer
    rng = random.Random(11)
    prompts = [tok.encode(w) for w in WORDS[:6]]
    layouts = [lay_out(parse_template(random_template(rng)), encode(tok), budget=24) for _ in prompts]
    settings = DecodeSettings(gen_length=24, temperature=temperature, block_length=4, denoising_steps=4,
                              window_size=8, seed=5)
    if name == "sdar":
        rows = decoder._generate_rules(prompts, settings, torch.tensor([len(layout) for layout in layouts]),
                                       layouts=layouts)
    else:
        rows = decoder._decode(prompts, settings, [len(layout) for layout in layouts], layouts)
    for layout, row in zip(layouts, rows):
        for pos, fixed in enumerate(layout.fixed[:len(row.token_ids)]):
            if fixed is not None:
                assert row.token_ids[pos] == fixed


def test_a_prefix_template_equals_a_forced_prefix(family):
    """["prefix", {}]: greedy, the same tokens as decoding with the prefix appended to the prompt."""
    _, loaded, decoder = family
    tok = loaded.tokenizer
    settings = DecodeSettings(gen_length=12, temperature=0, block_length=4, denoising_steps=4, window_size=8)
    for text, prefix in (("State: kitchen\n\nAction: look", "This room is called the kitchen."),
                         ("go", " You move to the"), ("x", "a")):
        prompt, forced = tok.encode(text), encode(tok)(prefix)
        layout = lay_out(parse_template([prefix, {}], max_tokens=12), encode(tok), budget=12)
        (got,) = decoder.generate_anchored([prompt], [layout], settings, tok.decode)
        (plain,) = decoder.generate([prompt + forced], settings)
        assert got.slot_token_ids[0] == plain.token_ids[:len(got.slot_token_ids[0])]
        assert got.text == prefix + tok.decode(got.slot_token_ids[0])
