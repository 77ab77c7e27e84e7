"""Diversity of a set of predictions: Self-BLEU and Distinct-n.

Self-BLEU (Zhu et al., 2018, "Texygen"): the mean over predictions of
``sacrebleu BLEU(effective_order=True).sentence_score(p_i, [all other predictions]).score / 100``.
Lower means more diverse. Above :data:`SELF_BLEU_MAX_SAMPLES` predictions, a fixed-seed sample
of that many is drawn and Self-BLEU is computed *within the sample* (each sampled prediction
against the other sampled ones), so the figure does not drift with corpus size.

Leave-one-out over N references costs sacrebleu O(N²) n-gram extractions; this module computes
the identical statistics in O(total n-grams): for each n-gram it keeps the largest and the
second-largest count across predictions, so "max count over all references but me" is a lookup.
The final score goes through ``sacrebleu``'s own ``BLEU.compute_bleu`` (smoothing, brevity
penalty, effective order), and tests check equality with ``sentence_score`` itself.

Distinct-n (Li et al., 2016): unique n-grams / total n-grams over whitespace tokens of all
predictions together.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Sequence

from textwm._optional import require

SELF_BLEU_MAX_SAMPLES = 1000
SELF_BLEU_SEED = 0
_BLEU_MAX_ORDER = 4


def _sample(texts: Sequence[str], max_samples: int, seed: int) -> list[str]:
    if max_samples <= 0 or len(texts) <= max_samples:
        return list(texts)
    idx = sorted(random.Random(seed).sample(range(len(texts)), max_samples))
    return [texts[i] for i in idx]


def _closest_other_length(sorted_lengths: list[int], own: int) -> int:
    """sacrebleu's closest reference length (ties -> the shorter), with one copy of ``own`` removed."""
    pos = bisect.bisect_left(sorted_lengths, own)
    # ``own`` sits at ``pos``; another prediction of the same length is a perfect match.
    if pos + 1 < len(sorted_lengths) and sorted_lengths[pos + 1] == own:
        return own
    below = sorted_lengths[pos - 1] if pos > 0 else None
    above = sorted_lengths[pos + 1] if pos + 1 < len(sorted_lengths) else None
    if below is None:
        return above  # type: ignore[return-value]
    if above is None:
        return below
    return below if own - below <= above - own else above


def self_bleu(predictions: Sequence[str], *, max_samples: int = SELF_BLEU_MAX_SAMPLES,
              seed: int = SELF_BLEU_SEED) -> tuple[float | None, int]:
    """Self-BLEU in [0, 1] and the number of predictions it was computed over.

    Returns ``(None, n)`` when fewer than two predictions are available (no reference set).
    """
    metrics = require("sacrebleu.metrics", extra="metrics", package="sacrebleu")
    texts = _sample(predictions, max_samples, seed)
    n = len(texts)
    if n < 2:
        return None, n
    bleu = metrics.BLEU(effective_order=True)
    docs: list[Counter] = []
    lengths: list[int] = []
    for text in texts:
        tokens = bleu._preprocess_segment(text).split()  # sacrebleu's 13a tokenisation
        grams: Counter = Counter()
        for order in range(1, _BLEU_MAX_ORDER + 1):
            for i in range(len(tokens) - order + 1):
                grams[tuple(tokens[i:i + order])] += 1
        docs.append(grams)
        lengths.append(len(tokens))

    # For each n-gram: (largest count, index of a doc holding it, second-largest count).
    top: dict[tuple, list[int]] = {}
    for doc_id, grams in enumerate(docs):
        for gram, count in grams.items():
            entry = top.get(gram)
            if entry is None:
                top[gram] = [count, doc_id, 0]
            elif count > entry[0]:
                entry[2] = entry[0]
                entry[0], entry[1] = count, doc_id
            elif count > entry[2]:
                entry[2] = count

    sorted_lengths = sorted(lengths)
    total_score = 0.0
    for doc_id, grams in enumerate(docs):
        correct = [0] * _BLEU_MAX_ORDER
        total = [0] * _BLEU_MAX_ORDER
        for gram, count in grams.items():
            best, best_doc, second = top[gram]
            ref_count = second if best_doc == doc_id else best
            total[len(gram) - 1] += count
            correct[len(gram) - 1] += min(count, ref_count)
        ref_len = _closest_other_length(sorted_lengths, lengths[doc_id])
        score = metrics.BLEU.compute_bleu(correct, total, lengths[doc_id], ref_len, smooth_method=bleu.smooth_method,
                                          smooth_value=bleu.smooth_value, effective_order=True,
                                          max_ngram_order=_BLEU_MAX_ORDER)
        total_score += score.score / 100
    return total_score / n, n


def distinct_n(predictions: Sequence[str], n: int) -> float | None:
    """Corpus-level unique n-grams / total n-grams over whitespace tokens; None if there is no n-gram."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in predictions:
        tokens = text.split()
        for i in range(len(tokens) - n + 1):
            seen.add(tuple(tokens[i:i + n]))
            total += 1
    return len(seen) / total if total else None
