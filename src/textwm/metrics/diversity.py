"""Diversity of a set of predictions: Self-BLEU and Distinct-n.

Self-BLEU (Zhu et al., 2018, "Texygen"): the mean over predictions of
``sacrebleu BLEU(effective_order=True).sentence_score(p_i, [all other predictions]).score / 100``.
Lower means more diverse. Above :data:`SELF_BLEU_MAX_SAMPLES` predictions, a fixed-seed sample
of that many is drawn and Self-BLEU is computed *within the sample* (each sampled prediction
against the other sampled ones), so the figure does not drift with corpus size.

Leave-one-out over N references costs sacrebleu O(N²) n-gram extractions; this module computes
the identical statistics in O(total n-grams): for each n-gram it keeps the largest counts across
predictions (with the predictions holding them), so "max count over all references but me" is a
lookup. The final score goes through ``sacrebleu``'s own ``BLEU.compute_bleu`` (smoothing, brevity
penalty, effective order), and tests check equality with ``sentence_score`` itself.

Distinct-n (Li et al., 2016): unique n-grams / total n-grams over whitespace tokens of all
predictions together.

Both are corpus-level: a prediction's contribution depends on the others. For intervals
(:mod:`textwm.metrics.bootstrap`) this module also gives their exact jackknife (leave-one-row-out) values,
:func:`self_bleu_jackknife` and :func:`distinct_n_jackknife`, computed from the same statistics.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Iterator, Sequence

from textwm._optional import require

SELF_BLEU_MAX_SAMPLES = 1000
SELF_BLEU_SEED = 0
_BLEU_MAX_ORDER = 4
#: Largest counts kept per n-gram: two answer "max over all but me"; a third answers it with one more row left out.
_TOP_HOLDERS = 3


def sample_rows(n: int, max_samples: int, seed: int = SELF_BLEU_SEED) -> list[int]:
    """The rows (sorted indices into ``n`` predictions) Self-BLEU is computed over: all, or a fixed-seed sample."""
    if max_samples <= 0 or n <= max_samples:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), max_samples))


class _Lengths:
    """A multiset of token lengths answering sacrebleu's closest reference length with some lengths left out."""

    def __init__(self, lengths: Sequence[int]):
        self.counts = Counter(lengths)
        self.values = sorted(self.counts)

    def closest(self, own: int, removed: Sequence[int]) -> int | None:
        """Closest length to ``own`` (ties -> the shorter, as sacrebleu's ``_get_closest_ref_len``) once one copy
        of each of ``removed`` is taken out; None if nothing is left."""
        gone = Counter(removed)

        def left(value: int) -> bool:
            return self.counts[value] > gone[value]

        pos = bisect.bisect_left(self.values, own)
        at_own = pos < len(self.values) and self.values[pos] == own
        if at_own and left(own):
            return own
        below = next((v for v in reversed(self.values[:pos]) if left(v)), None)
        above = next((v for v in self.values[pos + at_own:] if left(v)), None)
        if below is None:
            return above
        if above is None:
            return below
        return below if own - below <= above - own else above


class _SelfBleuCorpus:
    """Per-prediction n-gram counts, lengths and leave-one-out sentence BLEU of a set of texts (``len >= 2``)."""

    def __init__(self, texts: Sequence[str]):
        self.metrics = require("sacrebleu.metrics", extra="metrics", package="sacrebleu")
        self.bleu = self.metrics.BLEU(effective_order=True)
        self.docs: list[Counter] = []
        self.lengths: list[int] = []
        for text in texts:
            tokens = self.bleu._preprocess_segment(text).split()  # sacrebleu's 13a tokenisation
            grams: Counter = Counter()
            for order in range(1, _BLEU_MAX_ORDER + 1):
                grams.update(_ngrams(tokens, order))
            self.docs.append(grams)
            self.lengths.append(len(tokens))
        # For each n-gram: its largest counts with the prediction holding each, [(count, doc), ...] descending.
        self.top: dict[tuple, list[tuple[int, int]]] = {}
        top = self.top
        for doc_id, grams in enumerate(self.docs):
            for gram, count in grams.items():
                entry = top.get(gram)
                if entry is None:
                    top[gram] = [(count, doc_id)]
                    continue
                pos = len(entry)
                while pos and entry[pos - 1][0] < count:
                    pos -= 1
                if pos < _TOP_HOLDERS:
                    entry.insert(pos, (count, doc_id))
                    del entry[_TOP_HOLDERS:]
        self.length_index = _Lengths(self.lengths)
        self.correct: list[list[int]] = []
        self.total: list[list[int]] = []
        self.ref_lens: list[int] = []
        self.scores: list[float] = []
        for doc_id, grams in enumerate(self.docs):
            correct = [0] * _BLEU_MAX_ORDER
            total = [0] * _BLEU_MAX_ORDER
            for gram, count in grams.items():
                entry = top[gram]
                ref_count = entry[0][0] if entry[0][1] != doc_id else entry[1][0] if len(entry) > 1 else 0
                total[len(gram) - 1] += count
                correct[len(gram) - 1] += min(count, ref_count)
            ref_len = self.length_index.closest(self.lengths[doc_id], (self.lengths[doc_id],))
            self.correct.append(correct)
            self.total.append(total)
            self.ref_lens.append(ref_len)
            self.scores.append(self.sentence_bleu(doc_id, correct, ref_len))

    def sentence_bleu(self, doc_id: int, correct: list[int], ref_len: int) -> float:
        """sacrebleu's sentence BLEU in [0, 1] of prediction ``doc_id`` from its match counts and reference length."""
        bleu = self.bleu
        score = self.metrics.BLEU.compute_bleu(correct, self.total[doc_id], self.lengths[doc_id], ref_len,
                                               smooth_method=bleu.smooth_method, smooth_value=bleu.smooth_value,
                                               effective_order=True, max_ngram_order=_BLEU_MAX_ORDER)
        return score.score / 100

    def reference_effect(self) -> list[float]:
        """For each prediction ``i``: how much the others' scores drop without ``i`` among their references,
        ``sum over j != i of (s_j - s_j without i)``.

        Leaving ``i`` out changes ``j``'s score only where ``i`` alone holds the largest count of one of ``j``'s
        n-grams among the others (the count falls to the next one), or ``i`` is the only other prediction of
        ``j``'s closest reference length; only those pairs are re-scored.
        """
        effect = [0.0] * len(self.docs)
        docs_of_length: dict[int, list[int]] = {}
        for doc_id, length in enumerate(self.lengths):
            docs_of_length.setdefault(length, []).append(doc_id)
        for j, grams in enumerate(self.docs):
            drops: dict[int, list[int]] = {}
            for gram, count in grams.items():
                others = [entry for entry in self.top[gram] if entry[1] != j]
                if not others:
                    continue
                best, holder = others[0]
                runner_up = others[1][0] if len(others) > 1 else 0
                drop = min(count, best) - min(count, runner_up)
                if best > runner_up and drop:
                    drops.setdefault(holder, [0] * _BLEU_MAX_ORDER)[len(gram) - 1] += drop
            ref_len, own = self.ref_lens[j], self.lengths[j]
            sole_length_holder = [d for d in docs_of_length[ref_len] if d != j]
            length_doc = sole_length_holder[0] if len(sole_length_holder) == 1 else None
            for i in drops.keys() | ({length_doc} if length_doc is not None else set()):
                drop = drops.get(i, [0] * _BLEU_MAX_ORDER)
                correct = [c - d for c, d in zip(self.correct[j], drop)]
                new_ref_len = self.length_index.closest(own, (own, self.lengths[i])) if i == length_doc else ref_len
                effect[i] += self.scores[j] - self.sentence_bleu(j, correct, new_ref_len)
        return effect


def _ngrams(tokens: Sequence[str], n: int) -> Iterator[tuple[str, ...]]:
    return (tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def self_bleu(predictions: Sequence[str], *, max_samples: int = SELF_BLEU_MAX_SAMPLES,
              seed: int = SELF_BLEU_SEED) -> tuple[float | None, int]:
    """Self-BLEU in [0, 1] and the number of predictions it was computed over.

    Returns ``(None, n)`` when fewer than two predictions are available (no reference set).
    """
    texts = [predictions[i] for i in sample_rows(len(predictions), max_samples, seed)]
    n = len(texts)
    if n < 2:
        return None, n
    return sum(_SelfBleuCorpus(texts).scores) / n, n


def self_bleu_jackknife(predictions: Sequence[str], *, max_samples: int = SELF_BLEU_MAX_SAMPLES,
                        seed: int = SELF_BLEU_SEED) -> tuple[float, list[int], list[float]] | None:
    """Self-BLEU and its exact leave-one-out values over the rows it is computed on.

    Returns ``(self_bleu, rows, loo)``: ``rows`` are the indices into ``predictions`` of :func:`self_bleu`'s
    sample (all rows below ``max_samples``), ``loo[k]`` is Self-BLEU of that sample without ``rows[k]`` (the
    others then lose it as a reference too). None when fewer than three rows are sampled.
    Costs one Self-BLEU plus one sentence BLEU per (prediction, reference that alone sets one of its counts).
    """
    rows = sample_rows(len(predictions), max_samples, seed)
    m = len(rows)
    if m < 3:
        return None
    corpus = _SelfBleuCorpus([predictions[i] for i in rows])
    total = sum(corpus.scores)
    effect = corpus.reference_effect()
    loo = [(total - corpus.scores[k] - effect[k]) / (m - 1) for k in range(m)]
    return total / m, rows, loo


def distinct_n(predictions: Sequence[str], n: int) -> float | None:
    """Corpus-level unique n-grams / total n-grams over whitespace tokens; None if there is no n-gram."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in predictions:
        for gram in _ngrams(text.split(), n):
            seen.add(gram)
            total += 1
    return len(seen) / total if total else None


def distinct_n_jackknife(predictions: Sequence[str], n: int) -> list[float | None]:
    """Distinct-n of ``predictions`` without row ``i``, for each row ``i`` ([N]; None where nothing is left).

    Leaving a row out removes its n-grams from the total and, from the unique ones, those no other row has.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rows = [Counter(_ngrams(text.split(), n)) for text in predictions]
    counts: Counter = Counter()
    for grams in rows:
        counts.update(grams)
    types, total = len(counts), sum(counts.values())
    loo: list[float | None] = []
    for grams in rows:
        rest = total - sum(grams.values())
        only_here = sum(1 for gram, count in grams.items() if counts[gram] == count)
        loo.append((types - only_here) / rest if rest else None)
    return loo
