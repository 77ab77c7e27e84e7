"""The static-shape decode engine against the reference decoders, token for token (CPU, eager forwards).

The reference decoders are checked against ports of upstream's loops (test_sdar_decoder.py,
test_wedlm_decoder.py); here the engine must give their greedy output for every strategy, block length,
step count, window, stop condition and budget, with fewer rows than prompts (rows refill as others
finish: continuous batching), and with requests joining a running batch. Rows with their own sampling
settings share a step: a greedy row decodes the same next to sampling rows, and a row's repetition penalty
touches that row only. Models run in float64 so that the engine's attention and the reference's agree far
inside any threshold's margin.
"""

import dataclasses
import random

import pytest

from tests.generation.lmdeploy_reference import untie_head
from tests.generation.test_anchors import random_template
from tests.generation.wedlm_upstream import sharpen_head
from textwm.generation.anchors import lay_out, parse_template, slots_of
from textwm.generation.decoders import make_decoder, reference_decoder
from textwm.generation.engine import DecodeEngine, EngineFull
from textwm.generation.engine.decoder import EngineDecoder
from textwm.generation.remasking import STRATEGIES
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import ModelSpec, load_model


def _double(lm):
    lm.model.double()
    return lm


@pytest.fixture(scope="module")
def sdar(tiny_sdar_dir):
    return _double(untie_head(load_model(tiny_sdar_dir, device="cpu", dtype="float32")))


@pytest.fixture(scope="module")
def wedlm(tiny_wedlm_dir):
    return _double(sharpen_head(load_model(tiny_wedlm_dir, device="cpu", dtype="float32")))


@pytest.fixture(scope="module")
def ar(tiny_ar_dir):
    return _double(load_model(tiny_ar_dir, device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def prompts(sdar):
    rng = random.Random(0)
    vocab = len(sdar.tokenizer)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in (5, 9, 12, 17, 3, 8, 16, 1)]


LENGTHS = [11, 4, 13, 1, 9, 12, 7, 5]


def outcome(gens):
    return [(g.token_ids, g.finish_reason) for g in gens]


def assert_engine_equals_reference(lm, prompts, settings, *, spec=None, gen_lengths=None, max_rows=3):
    spec = spec or lm.spec
    ref = reference_decoder(lm.model, spec).generate(prompts, settings, gen_lengths)
    engine = DecodeEngine(lm.model, spec, max_rows=max_rows, max_len=64)
    got = engine.generate(prompts, settings, gen_lengths)
    assert outcome(got) == outcome(ref)
    return got


def with_stop(lm, token):
    return ModelSpec(**{**lm.spec.__dict__, "stop_ids": (token,)})


# --- SDAR ----------------------------------------------------------------------------------------------------

SDAR_CASES = [(1, 1), (4, 1), (4, 2), pytest.param(4, 4, marks=pytest.mark.slow), (8, 3),
              pytest.param(8, 8, marks=pytest.mark.slow)]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("block", "steps"), SDAR_CASES)
def test_sdar_generate_rules(sdar, prompts, strategy, block, steps):
    settings = DecodeSettings(gen_length=11, temperature=0, block_length=block, denoising_steps=steps,
                              remasking_strategy=strategy, confidence_threshold=0.3, entropy_budget=1.5)
    assert_engine_equals_reference(sdar, prompts, settings, gen_lengths=LENGTHS)


LMDEPLOY_CASES = [(4, 1, "low_confidence_dynamic", 0.85), (8, 1, "low_confidence_dynamic", 0.3),
                  (4, 4, "low_confidence_static", 0.85), (8, 3, "sequential", 0.85), (3, 2, "low_confidence_dynamic",
                                                                                        0.5)]


@pytest.mark.parametrize(("block", "steps", "strategy", "threshold"), LMDEPLOY_CASES)
def test_sdar_lmdeploy_rules(sdar, prompts, block, steps, strategy, threshold):
    settings = DecodeSettings(gen_length=13, temperature=0, sdar_rules="lmdeploy", block_length=block,
                              denoising_steps=steps, remasking_strategy=strategy, confidence_threshold=threshold)
    got = assert_engine_equals_reference(sdar, prompts, settings, gen_lengths=LENGTHS)
    assert all(len(g.token_ids) == n or g.finish_reason == "stop" for g, n in zip(got, LENGTHS))


@pytest.mark.parametrize("rules", ["generate", "lmdeploy"])
def test_sdar_stop_ids_and_repetition_penalty(sdar, prompts, rules):
    settings = DecodeSettings(gen_length=24, temperature=0, sdar_rules=rules, block_length=4, denoising_steps=2,
                              confidence_threshold=0.3)
    first = reference_decoder(sdar.model, sdar.spec).generate(prompts[:1], settings)[0]
    spec = with_stop(sdar, first.token_ids[6])
    got = assert_engine_equals_reference(sdar, prompts, settings, spec=spec)
    assert got[0].finish_reason == "stop"
    assert_engine_equals_reference(sdar, prompts, dataclasses.replace(settings, repetition_penalty=1.6))


# --- WeDLM ---------------------------------------------------------------------------------------------------

WEDLM_CASES = [(1, 0.4, 0.02), (4, 0.4, 0.02), (4, 100.0, 0.0), (8, 5.0, 0.1), (16, 4.6, 0.0), (6, 4.5, 0.01),
               (16, 4.7, 0.02)]


@pytest.mark.parametrize(("window", "threshold", "penalty"), WEDLM_CASES)
def test_wedlm(wedlm, prompts, window, threshold, penalty):
    settings = DecodeSettings(gen_length=11, temperature=0, window_size=window, entropy_threshold=threshold,
                              position_penalty=penalty)
    assert_engine_equals_reference(wedlm, prompts, settings, gen_lengths=[11, 4, 13, 1, 9, 20, 7, 16])


def test_wedlm_the_last_window_of_a_longer_budget(wedlm, prompts):
    """The paper's settings (window 16, threshold 0.6, penalty 0.02) over 40 tokens: the engine's window is not
    shrunk to the tokens left either (test_wedlm_decoder.py ``test_the_last_window_of_a_longer_budget_as_upstream``)."""
    settings = DecodeSettings(gen_length=40, temperature=0, window_size=16, entropy_threshold=0.6,
                              position_penalty=0.02)
    assert_engine_equals_reference(wedlm, prompts, settings, gen_lengths=[40, 40, 40, 40, 40, 40, 40, 17])


def test_wedlm_stop_id_mid_window(wedlm, prompts):
    settings = DecodeSettings(gen_length=20, temperature=0, window_size=4, entropy_threshold=100.0,
                              position_penalty=0.0)
    first = reference_decoder(wedlm.model, wedlm.spec).generate(prompts[:1], settings)[0].token_ids
    got = assert_engine_equals_reference(wedlm, prompts, settings, spec=with_stop(wedlm, first[6]))
    assert got[0].finish_reason == "stop" and got[0].token_ids == first[:first.index(first[6])]


# --- AR ------------------------------------------------------------------------------------------------------

def test_ar_greedy_stop_and_penalty(ar, prompts):
    settings = DecodeSettings(gen_length=12, temperature=0)
    first = assert_engine_equals_reference(ar, prompts, settings, gen_lengths=LENGTHS)
    got = assert_engine_equals_reference(ar, prompts, settings, spec=with_stop(ar, first[0].token_ids[4]))
    assert got[0].finish_reason == "stop"
    assert_engine_equals_reference(ar, prompts, dataclasses.replace(settings, repetition_penalty=1.5))


# --- continuous batching -------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_requests_joining_a_running_batch_decode_as_if_alone(family, sdar, wedlm, ar, prompts):
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = DecodeSettings(gen_length=10, temperature=0, block_length=4, denoising_steps=2,
                              confidence_threshold=0.3, window_size=4, entropy_threshold=4.6)
    alone = [reference_decoder(lm.model, lm.spec).generate([p], settings)[0] for p in prompts]
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=64)
    done, tokens = {}, {i: [] for i in range(len(prompts))}
    waiting = list(range(len(prompts)))
    steps = 0
    while waiting or engine.num_active:
        if waiting and engine.free_rows and steps % 2 == 0:   # join every other step, one at a time
            engine.admit(waiting[0], prompts[waiting.pop(0)], settings, 10)
        for u in engine.step():
            tokens[u.key] += u.token_ids
            if u.finished is not None:
                done[u.key] = u.finished
        steps += 1
    assert outcome([done[i] for i in range(len(prompts))]) == outcome(alone)
    assert all(tokens[i] == done[i].token_ids for i in tokens)   # the step updates add up to the result


# --- per-row sampling settings ------------------------------------------------------------------------------

FAMILY_RULES = [("sdar", "generate"), ("sdar", "lmdeploy"), ("wedlm", "generate"), ("ar", "generate")]
#: One step structure for every family (each ignores the others' knobs).
STRUCTURE = DecodeSettings(gen_length=10, temperature=0, block_length=4, denoising_steps=2, confidence_threshold=0.3,
                           window_size=4, entropy_threshold=4.6)


def run_engine(lm, prompts, settings, lengths, *, max_rows=3, watch=None):
    """Each prompt under its own settings, admitted in order as rows free up; ``watch(engine)`` after each step."""
    engine = DecodeEngine(lm.model, lm.spec, max_rows=max_rows, max_len=64)
    done, waiting = {}, list(range(len(prompts)))
    while waiting or engine.num_active:
        while waiting and engine.free_rows and engine.compatible(settings[waiting[0]]):
            i = waiting.pop(0)
            engine.admit(i, prompts[i], settings[i], lengths[i])
        for u in engine.step():
            if u.finished is not None:
                done[u.key] = u.finished
        if watch is not None:
            watch(engine)
    return [done[i] for i in range(len(prompts))]


@pytest.mark.parametrize(("family", "rules"), FAMILY_RULES)
def test_greedy_rows_decode_the_same_next_to_sampling_rows(family, rules, sdar, wedlm, ar, prompts):
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    greedy = dataclasses.replace(STRUCTURE, sdar_rules=rules)
    sampled = [dataclasses.replace(greedy, temperature=1.0, top_k=k, top_p=p) for k, p in ((0, 1.0), (8, 0.9))]
    per_row = [greedy if i % 2 == 0 else sampled[i // 2 % 2] for i in range(6)]
    widths = set()
    got = run_engine(lm, prompts[:6], per_row, LENGTHS[:6], watch=lambda e: widths.add(e._rows.seen.shape[1]))
    want = reference_decoder(lm.model, lm.spec).generate(prompts[:6], greedy, LENGTHS[:6])
    assert outcome(got[0::2]) == outcome(want[0::2])               # the greedy rows: as if all rows were greedy
    assert outcome(got[1::2]) != outcome(want[1::2])               # the others did sample
    assert widths == {1}                                           # nobody penalises: no [rows, V] table


@pytest.mark.parametrize(("family", "rules"), [("sdar", "generate"), ("sdar", "lmdeploy"), ("ar", "generate")])
def test_per_row_repetition_penalty_decodes_each_row_as_if_alone(family, rules, sdar, ar, prompts):
    lm = {"sdar": sdar, "ar": ar}[family]
    plain = dataclasses.replace(STRUCTURE, gen_length=12, sdar_rules=rules)
    per_row = [dataclasses.replace(plain, repetition_penalty=r) for r in (1.0, 1.8, 1.3, 1.0, 1.8)]
    widths = []
    got = run_engine(lm, prompts[:5], per_row, [12] * 5, watch=lambda e: widths.append(e._rows.seen.shape[1]))
    ref = reference_decoder(lm.model, lm.spec)
    alone = [ref.generate([p], s)[0] for p, s in zip(prompts, per_row)]
    assert outcome(got) == outcome(alone)
    assert outcome(alone[1::3]) != outcome(ref.generate(prompts[1:5:3], plain))   # the penalty changed them
    assert max(widths) == lm.model.get_output_embeddings().weight.shape[0] and widths[-1] == 1   # freed at the end


def test_sampling_settings_join_running_rows_and_step_structures_wait(sdar, prompts):
    greedy = DecodeSettings(gen_length=8, temperature=0)
    engine = DecodeEngine(sdar.model, sdar.spec, max_rows=4, max_len=32)
    engine.admit("a", prompts[0], greedy, 8)
    nucleus = dataclasses.replace(greedy, temperature=0.8, top_p=0.9, top_k=20, repetition_penalty=1.2)
    assert engine.compatible(nucleus)                                            # joins: no wait
    engine.admit("b", prompts[1], nucleus, 8)
    assert not engine.compatible(dataclasses.replace(greedy, block_length=2))   # another structure waits
    assert not engine.compatible(dataclasses.replace(greedy, sdar_rules="lmdeploy"))
    assert not engine.compatible(dataclasses.replace(greedy, seed=3))           # a seed: not with unseeded rows
    engine.step()
    assert engine.compatible(nucleus) and engine.compatible(greedy)
    while engine.num_active:
        engine.step()
    seeded = dataclasses.replace(nucleus, seed=3)
    engine.admit("c", prompts[2], seeded, 8)
    assert engine.compatible(seeded)                           # the same seeded request's next row shares its generator
    assert not engine.compatible(nucleus) and not engine.compatible(dataclasses.replace(seeded, temperature=0.5))


def test_admission_rules(sdar, prompts):
    settings = DecodeSettings(gen_length=8, temperature=0)
    engine = DecodeEngine(sdar.model, sdar.spec, max_rows=2, max_len=32)
    engine.admit("a", prompts[0], settings, 8)
    with pytest.raises(ValueError, match="already decoding"):
        engine.admit("a", prompts[1], settings, 8)
    assert not engine.compatible(dataclasses.replace(settings, denoising_steps=1))
    assert engine.compatible(dataclasses.replace(settings, gen_length=99))
    with pytest.raises(ValueError, match="differ from the running rows"):
        engine.admit("b", prompts[1], dataclasses.replace(settings, denoising_steps=1), 8)
    with pytest.raises(ValueError, match="max_len 32"):
        engine.admit("b", prompts[3], settings, 16)
    with pytest.raises(ValueError, match="empty prompt"):
        engine.admit("b", [], settings, 4)
    engine.admit("b", prompts[1], settings, 8)
    with pytest.raises(EngineFull):
        engine.admit("c", prompts[2], settings, 8)
    engine.step()
    engine.cancel("a")
    assert engine.num_active == 1
    while engine.num_active:
        engine.step()
    engine.admit("c", prompts[2], dataclasses.replace(settings, denoising_steps=1), 8)   # drained: new settings


def test_make_decoder_picks_the_engine_on_request(sdar):
    assert isinstance(make_decoder(sdar.model, sdar.spec, engine="static"), EngineDecoder)
    assert not isinstance(make_decoder(sdar.model, sdar.spec), EngineDecoder)       # CPU: the reference
    with pytest.raises(ValueError, match="unknown decoder engine"):
        make_decoder(sdar.model, sdar.spec, engine="fast")


def test_engine_decoder_grows_its_cache(sdar, prompts):
    dec = EngineDecoder(sdar.model, sdar.spec, max_rows=4)
    settings = DecodeSettings(gen_length=8, temperature=0)
    dec.generate(prompts[:2], settings)
    first = dec.engine
    assert (first.max_rows, first.max_len) == (2, 512)
    dec.generate(prompts[:2], settings)
    assert dec.engine is first                                  # kept while calls fit
    got = dec.generate(prompts, dataclasses.replace(settings, gen_length=500))
    assert dec.engine is not first and (dec.engine.max_rows, dec.engine.max_len) == (4, 1024)
    assert len(got) == len(prompts)


def test_a_failed_step_leaves_an_idle_engine_that_decodes_again(sdar, prompts):
    settings = DecodeSettings(gen_length=8, temperature=0)
    engine = DecodeEngine(sdar.model, sdar.spec, max_rows=4, max_len=64)
    forward, calls = engine.forward, []

    def failing(*args, **kwargs):       # a fault on the third forward (as an out-of-memory error would come)
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected fault")
        return forward(*args, **kwargs)

    engine.forward = failing            # the row state takes the engine's forward when rows start
    with pytest.raises(RuntimeError, match="injected fault"):
        engine.generate(prompts, settings)
    assert engine.num_active == 0 and engine.compatible(dataclasses.replace(settings, denoising_steps=1))
    engine.forward = forward
    got = engine.generate(prompts, settings)
    assert outcome(got) == outcome(reference_decoder(sdar.model, sdar.spec).generate(prompts, settings))


@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_the_warm_up_of_every_shape_leaves_the_rows_to_decode_as_the_reference(family, sdar, wedlm, ar, prompts):
    """The warm-up runs a placeholder forward of every row bucket, kv bucket and step shape into the free rows
    (eagerly here; captured on CUDA): what it leaves in them is never read."""
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = DecodeSettings(gen_length=9, temperature=0, block_length=4, denoising_steps=2, window_size=4)
    ref = reference_decoder(lm.model, lm.spec).generate(prompts, settings, LENGTHS)
    for graph_tokens in (0, 256):   # bucketed prefills: their shapes, and the eager prefill of wider joins, too
        engine = DecodeEngine(lm.model, lm.spec, max_rows=3, max_len=300, prefill_graph_tokens=graph_tokens)
        engine.warm_up(settings)
        assert engine.stats.warm_up_s > 0 and engine.num_graphs == 0      # no graphs on the CPU
        assert engine.prompt_stats.prompt_tokens == 0                       # the stats describe serving
        assert outcome(engine.generate(prompts, settings, LENGTHS)) == outcome(ref)


def test_the_shape_buckets_cover_every_batch_and_length():
    from textwm.generation.engine.graphs import kv_bucket, kv_buckets, row_bucket, row_buckets

    assert row_buckets(64) == [1, 2, 4, 8, 16, 32, 64] and row_buckets(24) == [1, 2, 4, 8, 16, 24]
    assert kv_buckets(600) == [256, 512, 600] and kv_buckets(100) == [100]
    for capacity in (100, 600, 4160):
        assert {kv_bucket(k, capacity) for k in range(1, capacity + 1)} == set(kv_buckets(capacity))
    assert {row_bucket(r, 24) for r in range(1, 25)} == set(row_buckets(24))


def test_blas_is_left_alone_on_the_cpu_and_checked(tiny_ar_dir):
    lm = load_model(tiny_ar_dir, device="cpu", dtype="float32")
    assert DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32).blas is None
    with pytest.raises(ValueError, match="blas must be one of"):
        DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=32, blas="mkl")


# --- anchored rows -------------------------------------------------------------------------------------------

def anchored_layouts(lm, count, seed, budget=24):
    """``count`` random layouts (test_anchors.py's random templates)."""
    rng = random.Random(seed)
    encode = lambda text: lm.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    return [lay_out(parse_template(random_template(rng, budget), max_tokens=budget), encode, budget)
            for _ in range(count)]


def assert_anchored_engine_equals_reference(lm, prompts, layouts, settings, *, spec=None, max_rows=3):
    spec = spec or lm.spec
    decode = lm.tokenizer.decode
    ref = reference_decoder(lm.model, spec).generate_anchored(prompts, layouts, settings, decode)
    got = EngineDecoder(lm.model, spec, max_rows=max_rows).generate_anchored(prompts, layouts, settings, decode)
    assert [(a.text, a.slot_token_ids, a.finish_reason) for a in got] == \
        [(a.text, a.slot_token_ids, a.finish_reason) for a in ref]
    return got


ANCHORED_SETTINGS = {
    "sdar": [DecodeSettings(gen_length=24, temperature=0, block_length=4, denoising_steps=2),
             DecodeSettings(gen_length=24, temperature=0, block_length=8, denoising_steps=3,
                            remasking_strategy="low_confidence_dynamic", confidence_threshold=0.3)],
    "wedlm": [DecodeSettings(gen_length=24, temperature=0, window_size=8, entropy_threshold=4.6),
              DecodeSettings(gen_length=24, temperature=0, window_size=4, entropy_threshold=100.0)],
    "ar": [DecodeSettings(gen_length=24, temperature=0), DecodeSettings(gen_length=24, temperature=0,
                                                                        repetition_penalty=1.5)],
}


@pytest.mark.parametrize("case", [0, pytest.param(1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_anchored_rows_fill_templates_as_the_reference(family, case, sdar, wedlm, ar, prompts):
    """Greedy, random templates, fewer rows than prompts: the engine's filled templates are the reference's; and
    with a stop id the models write often, so that slots end early and open slots end at a stop."""
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = ANCHORED_SETTINGS[family][case]
    layouts = anchored_layouts(lm, len(prompts), seed=case)
    got = assert_anchored_engine_equals_reference(lm, prompts, layouts, settings)
    common = max((t for a in got for s in a.slot_token_ids for t in s), key=[
        t for a in got for s in a.slot_token_ids for t in s].count)
    assert_anchored_engine_equals_reference(lm, prompts, layouts, settings, spec=with_stop(lm, common))


@pytest.mark.parametrize("family", ["sdar", "wedlm", "ar"])
def test_anchored_rows_beside_plain_rows_decode_as_if_alone(family, sdar, wedlm, ar, prompts):
    """Anchored and plain requests share the engine's rows: each decodes as it does alone."""
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = ANCHORED_SETTINGS[family][0]
    layouts = anchored_layouts(lm, len(prompts), seed=5)
    ref = reference_decoder(lm.model, lm.spec)
    canvases = [ref.generate_anchored([p], [lay], settings, lm.tokenizer.decode)[0] for p, lay in zip(prompts, layouts)]
    plain = ref.generate(prompts, settings)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=4, max_len=64)
    for i, p in enumerate(prompts):                     # alternate anchored and plain requests, 4 rows at a time
        engine.admit(("a", i), p, settings, settings.gen_length, layouts[i] if i % 2 == 0 else None)
        if engine.free_rows == 0 or i == len(prompts) - 1:
            while engine.num_active:
                for u in engine.step():
                    if u.finished is None:
                        continue
                    j = u.key[1]
                    if j % 2 == 0:
                        slots, _ = slots_of(layouts[j], u.finished.token_ids, lm.spec.stop_ids)
                        assert slots == canvases[j].slot_token_ids
                    else:
                        assert u.finished.token_ids == plain[j].token_ids


def test_anchored_rows_are_refused_where_the_rules_cannot_keep_them(sdar, ar, prompts):
    layout = anchored_layouts(sdar, 1, seed=0)[0]
    lmdeploy = DecodeSettings(gen_length=24, temperature=0, sdar_rules="lmdeploy", block_length=4,
                              denoising_steps=1)
    with pytest.raises(ValueError, match="generate rules"):
        DecodeEngine(sdar.model, sdar.spec, max_rows=2, max_len=64).generate_anchored(prompts[:1], lmdeploy, [layout])
    no_stop = ModelSpec(**{**ar.spec.__dict__, "stop_ids": ()})
    with pytest.raises(ValueError, match="needs the checkpoint's stop ids"):
        DecodeEngine(ar.model, no_stop, max_rows=2, max_len=64).generate_anchored(
            prompts[:1], DecodeSettings(gen_length=24, temperature=0), [layout])


# --- prefix cache --------------------------------------------------------------------------------------------

FAMILIES_AND_RULES = [("ar", None), ("sdar", "generate"), ("sdar", "lmdeploy"), ("wedlm", None)]


@pytest.mark.parametrize(("family", "rules"), FAMILIES_AND_RULES)
def test_a_cached_prefix_decodes_as_a_prompt_prefilled_whole(family, rules, sdar, wedlm, ar, prompts):
    """Prompts that share prefixes (a GRPO group, a growing episode): greedy, the engine with its prefix cache
    decodes what the reference decoder does, and the second pass over the same prompts finds their prefixes."""
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = DecodeSettings(gen_length=9, temperature=0, block_length=4, denoising_steps=2,
                              confidence_threshold=0.3, window_size=4, entropy_threshold=4.6,
                              **({"sdar_rules": rules} if rules else {}))
    base = prompts[3] + prompts[6]                                           # 33 tokens
    shared = [base, base + prompts[0], base[:20] + prompts[1], base + prompts[0] + prompts[4], base[:9],
              prompts[2]]
    ref = reference_decoder(lm.model, lm.spec).generate(shared, settings)
    engine = DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=96, prefix_cache_tokens=64, prefix_block_tokens=8)
    for _ in range(2):
        assert outcome(engine.generate(shared, settings)) == outcome(ref)
    stats = engine.prompt_stats
    assert stats.hit_tokens > 0 and stats.computed_tokens + stats.hit_tokens == stats.prompt_tokens
    # A GRPO group's first turn: rows joining together that share blocks the cache lacks compute them once.
    group = DecodeEngine(lm.model, lm.spec, max_rows=6, max_len=96, prefix_cache_tokens=64, prefix_block_tokens=8)
    assert outcome(group.generate(shared, settings)) == outcome(ref)
    assert group.prompt_stats.hit_tokens >= 4 * 8          # base's first block, for each of its 4 followers
    # A budget smaller than the prefixes evicts the least recently used blocks: still exact.
    small = DecodeEngine(lm.model, lm.spec, max_rows=2, max_len=96, prefix_cache_tokens=16, prefix_block_tokens=8)
    assert outcome(small.generate(shared + shared, settings)) == outcome(ref + ref)
    assert len(small.prefix_cache.index) <= 2


@pytest.mark.parametrize(("family", "rules"), FAMILIES_AND_RULES)
@pytest.mark.parametrize("graph_tokens", [0, 64, 256])
def test_a_grpo_group_prefills_each_prompt_once_and_bucketed_prefills_are_exact(family, rules, graph_tokens, sdar,
                                                                                 wedlm, ar, prompts):
    """A group's turn joins together: identical prompts are computed once and copied, prompts sharing new blocks
    take two passes, and (``graph_tokens``) the prefills run padded to bucketed shapes, padding rows included;
    greedy, every answer is the reference decoder's, with and without the cache."""
    lm = {"sdar": sdar, "wedlm": wedlm, "ar": ar}[family]
    settings = DecodeSettings(gen_length=9, temperature=0, block_length=4, denoising_steps=2,
                              confidence_threshold=0.3, window_size=4, entropy_threshold=4.6,
                              **({"sdar_rules": rules} if rules else {}))
    start = prompts[3] + prompts[6]                                     # 33 tokens
    turn_1 = [start] * 3                                                # 3 rows: a padding row in the bucket of 4
    turn_2 = [start + prompts[0], start + prompts[0], start + prompts[1], start[:20] + prompts[2], start + prompts[1]]
    ref = reference_decoder(lm.model, lm.spec).generate(turn_1 + turn_2, settings)
    computed = {}
    for cache_tokens in (64, 0):
        engine = DecodeEngine(lm.model, lm.spec, max_rows=5, max_len=96, prefix_cache_tokens=cache_tokens,
                              prefix_block_tokens=8, prefill_graph_tokens=graph_tokens)
        assert outcome(engine.generate(turn_1, settings) + engine.generate(turn_2, settings)) == outcome(ref)
        stats = engine.prompt_stats
        assert stats.computed_tokens + stats.hit_tokens == stats.prompt_tokens
        assert stats.unbucketed_forwards == (stats.forwards if graph_tokens == 0 else 0)
        computed[cache_tokens] = stats.computed_tokens
    if family != "sdar":   # (SDAR prefills its prompts' whole blocks only.) Turn 1 computes its prompt once, turn 2
        distinct = [turn_2[0], turn_2[2], turn_2[3]]   # each distinct prompt past start's cached blocks
        assert computed[64] == len(start) + sum(map(len, distinct)) - 32 - 32 - 16
        assert computed[0] == sum(map(len, turn_1 + turn_2))
    assert 2 * computed[64] < computed[0]


def test_the_prefix_cache_keys_blocks_by_tokens_and_attention_rule_and_evicts_the_oldest():
    import torch

    from textwm.generation.engine.prefix_cache import PrefixCache

    cache = PrefixCache(layers=2, n_kv=2, head_dim=2, dtype=torch.float32, device=torch.device("cpu"), max_blocks=2,
                        block_tokens=2)
    prompt = [5, 6, 7, 8, 9]
    keys = cache.chain(prompt, 5, None)
    assert len(keys) == 2 and keys != cache.chain(prompt, 5, 4) and keys[0] == cache.chain([5, 6, 0], 3, None)[0]
    row_k = torch.arange(128, dtype=torch.float32).reshape(2, 2, 2, 8, 2)   # engine rows [L, rows, H_kv, T, D]
    cache.store([keys], [0], row_k, -row_k, [1])                            # from row 1
    assert cache.lookup(keys) == [0, 1]
    loaded_k, loaded_v = torch.zeros(2, 3, 2, 8, 2), torch.zeros(2, 3, 2, 8, 2)
    cache.load(loaded_k, loaded_v, [2, 0], [[0, 1], [1]])                   # rows 2 and 0 at once
    assert torch.equal(loaded_k[:, 2, :, :4], row_k[:, 1, :, :4]) and torch.equal(loaded_v[:, 2, :, :4], -row_k[:, 1, :, :4])
    assert torch.equal(loaded_k[:, 0, :, :2], row_k[:, 1, :, 2:4]) and not loaded_k[:, 0, :, 2:].any()
    assert not loaded_k[:, 1].any()
    # Two rows of one prefill with the same new block keep it once.
    twice = PrefixCache(layers=2, n_kv=2, head_dim=2, dtype=torch.float32, device=torch.device("cpu"), max_blocks=4,
                        block_tokens=2)
    twice.store([keys, keys], [0, 0], row_k, -row_k, [0, 1])
    assert len(twice.index) == 2 and sorted(twice.free) == [2, 3]
    other = cache.chain([1, 2, 3], 3, None)
    cache.store([other], [0], row_k + 100, row_k, [0])                    # takes the least recently used block
    assert cache.lookup(keys) == []          # the chain's first block went: the rest is unreachable
    assert len(cache.index) == 2 and cache.lookup(other) == [0]
