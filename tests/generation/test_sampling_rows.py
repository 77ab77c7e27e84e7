"""Per-row sampling (the decode engine's rows each sample by their own request's settings) against the scalar
samplers: row by row the same distribution, and with the same generator state the same draw."""

import pytest
import torch

from textwm.generation.sampling import (
    RowParams,
    apply_repetition_penalty,
    sample,
    sample_filter_first,
    sample_filter_first_rows,
    sample_rows,
    top_p_filter_rows,
)
from textwm.generation.sdar_lmdeploy import lmdeploy_sample, lmdeploy_sample_rows
from textwm.generation.settings import DecodeSettings

V = 50
#: (temperature, top_k, top_p) per row: greedy (with filters it must ignore), plain, top-k, top-p, both.
MIXED = [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 3, 0.6), (0.0, 2, 0.3),
         (1.0, 1, 1.0), (0.9, 80, 0.95)]


def _logits(n, seed=0):
    return torch.randn(n, V, generator=torch.Generator().manual_seed(seed)) * 3


def _gen(seed=7):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("rows_fn", "scalar_fn"), [(sample_rows, sample),
                                                    (sample_filter_first_rows, sample_filter_first)])
def test_each_row_samples_as_the_scalar_sampler_with_its_settings(rows_fn, scalar_fn):
    logits = _logits(len(MIXED))
    got = rows_fn(logits, RowParams.of(MIXED), generator=_gen())
    for i, (t, k, p) in enumerate(MIXED):
        want = scalar_fn(logits, temperature=t, top_k=k, top_p=p, generator=_gen(), how="race")   # all at row i's
        assert torch.equal(got.probs[i], want.probs[i]), MIXED[i]
        assert got.tokens[i] == want.tokens[i] and got.confidence[i] == want.confidence[i], MIXED[i]


@pytest.mark.parametrize(("rows_fn", "scalar_fn"), [(sample_rows, sample),
                                                    (sample_filter_first_rows, sample_filter_first)])
@pytest.mark.parametrize("settings", [(0.0, 0, 1.0), (0.8, 4, 0.9), (1.0, 0, 1.0)])
def test_rows_sharing_settings_equal_the_scalar_sampler(rows_fn, scalar_fn, settings):
    logits = _logits(6, seed=1)
    got = rows_fn(logits, RowParams.of([settings] * 6), generator=_gen())
    want = scalar_fn(logits, temperature=settings[0], top_k=settings[1], top_p=settings[2], generator=_gen(),
                     how="race")
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.probs, want.probs)


def test_greedy_rows_take_the_argmax_and_filtered_tokens_are_never_drawn():
    logits = _logits(4, seed=2).repeat(100, 1)                             # 400 rows: 100 of each setting
    settings = [(0.0, 0, 1.0), (1.0, 1, 1.0), (1.0, 3, 1.0), (2.0, 0, 0.5)] * 100
    rows = RowParams.of(settings)
    assert (rows.all_greedy, rows.top_k_max, rows.any_top_p) == (False, 3, True)
    tokens = sample_rows(logits, rows, generator=_gen()).tokens.view(100, 4)
    argmax = logits[:4].argmax(dim=-1)
    assert (tokens[:, 0] == argmax[0]).all() and (tokens[:, 1] == argmax[1]).all()   # greedy; top_k = 1
    top3 = set(torch.topk(logits[2], 3).indices.tolist())
    assert set(tokens[:, 2].tolist()) <= top3 and len(set(tokens[:, 2].tolist())) > 1
    probs = torch.softmax(logits[3] / 2.0, dim=-1)
    order = probs.argsort(descending=True)
    nucleus = order[:int((probs[order].cumsum(0) < 0.5).sum()) + 1]
    assert set(tokens[:, 3].tolist()) <= set(nucleus.tolist())


def test_all_greedy_rows_are_one_argmax():
    logits = _logits(5, seed=3)
    rows = RowParams.of([(0.0, 4, 0.5)] * 5)                               # filters of greedy rows: ignored
    got, want = sample_rows(logits, rows), sample(logits, temperature=0)
    assert rows.all_greedy and torch.equal(got.tokens, want.tokens) and torch.equal(got.probs, want.probs)


def test_top_p_of_one_keeps_every_token_even_when_the_sum_rounds_past_one():
    logits = torch.zeros(2, 1000)                                          # float32 cumsum of 1000 x 0.001
    kept = top_p_filter_rows(logits, torch.tensor([1.0, 0.5]))
    assert torch.isfinite(kept[0]).all() and torch.isinf(kept[1]).sum() > 0


def test_repetition_penalty_per_row():
    logits = _logits(3, seed=4)[:, None, :]                                # [R, B, V]
    seen = torch.rand(3, V, generator=_gen()) < 0.3
    got = apply_repetition_penalty(logits, seen, torch.tensor([1.0, 1.5, 2.0]))
    assert torch.equal(got[0], logits[0])                                  # a row at 1.0 is left alone
    for r, p in ((1, 1.5), (2, 2.0)):
        assert torch.equal(got[r], apply_repetition_penalty(logits, seen, p)[r])


def test_lmdeploy_rows_equal_the_scalar_lmdeploy_sampler():
    logits = _logits(4 * 3, seed=5).view(4, 3, V)                          # [R, B, V]
    seen = torch.rand(4, V, generator=_gen()) < 0.3
    per_row = [DecodeSettings(temperature=0, repetition_penalty=1.4), DecodeSettings(temperature=0.8, top_k=4),
               DecodeSettings(temperature=1.2, top_p=0.7, repetition_penalty=1.2), DecodeSettings(temperature=0)]
    rows = RowParams.of([(s.temperature, s.top_k, s.top_p) for s in per_row])
    penalty = torch.tensor([s.repetition_penalty for s in per_row])
    tokens, conf = lmdeploy_sample_rows(logits, rows, penalty=penalty, penalized=seen, generator=_gen())
    for r, s in enumerate(per_row):
        want_t, want_c = lmdeploy_sample(logits, s, penalized=seen, generator=_gen())
        assert torch.equal(tokens[r], want_t[r]) and torch.equal(conf[r], want_c[r]), s
    greedy = RowParams.of([(0.0, 0, 1.0)] * 4)
    assert torch.equal(lmdeploy_sample_rows(logits, greedy)[0],
                       lmdeploy_sample(logits, DecodeSettings(temperature=0))[0])
