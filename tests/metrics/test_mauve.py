import mauve
import numpy as np
import pytest

from textwm.metrics.mauve import DEFAULT_FEATURIZER, get_featurizer, mauve_score

ROOMS = ["kitchen", "hallway", "bedroom", "workshop", "greenhouse", "foundry", "bathroom", "art studio"]


def _observations(n, offset=0):
    return [f"This room is called the {ROOMS[(i + offset) % len(ROOMS)]}. In it, you see: a {i % 7} thermometer"
            for i in range(n)]


def test_featurizer_is_offline_minilm_and_dedupes():
    featurize = get_featurizer(DEFAULT_FEATURIZER)
    feats = featurize(["a door", "a door", "the stove"])
    assert feats.shape == (3, 384) and feats.dtype == np.float32
    assert np.array_equal(feats[0], feats[1])
    assert np.allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-5)  # the model normalises


def test_mauve_equals_library_on_the_same_features():
    preds, refs = _observations(60, offset=3), _observations(60)
    result = mauve_score(preds, refs)
    featurize = get_featurizer()
    direct = mauve.compute_mauve(p_features=featurize(refs), q_features=featurize(preds)).mauve
    assert result.score == pytest.approx(direct)
    assert (result.num_samples, result.featurizer) == (60, DEFAULT_FEATURIZER)


def test_mauve_separates_same_and_different_distributions():
    refs = _observations(80)
    same = mauve_score(_observations(80, offset=8), refs).score     # same texts, other order
    unrelated = mauve_score([f"ERROR code {i} stack trace overflow" for i in range(80)], refs).score
    assert same > 0.9 > 0.2 > unrelated


def test_mauve_needs_two_rows(caplog):
    result = mauve_score(["one"], ["one"])
    assert result.score is None and result.num_samples == 1
    assert "MAUVE skipped" in caplog.text


def test_mauve_sample_cap():
    result = mauve_score(_observations(30), _observations(30, 1), max_samples=12)
    assert result.num_samples == 12
