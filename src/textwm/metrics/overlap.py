"""Overlap metrics between predictions and references: ROUGE-L F1 and corpus BLEU-1.

ROUGE-L is Google ``rouge_score``'s ``RougeScorer(["rougeL"])`` F-measure, bit for bit: its own
tokenizer (lower-case, non-alphanumerics to spaces, no stemming) and the same precision/recall/F
formula. Only the LCS length is computed differently — with the bit-parallel algorithm of
Allison & Dix (1986) / Hyyrö (2004), O(n·m/64) instead of rouge_score's pure-Python O(n·m) table,
which makes 10,000 long observations take a second instead of minutes. Tests check equality
with ``rouge_score`` itself.

The second ROUGE-L implementation, ``pltrdy`` (PyPI ``rouge`` 1.0.1, ``from rouge import Rouge``),
is the one the paper's ``sdar/``, ``wedlm/`` and ``llm_training/evaluate.py`` call: ``Rouge()`` with
its default metrics, ``get_scores(pred or " ", ref or " ")[0]["rouge-l"]["f"]`` per row, any
exception scored 0.0 (``compute_metrics`` in those scripts). Its ROUGE-L is summary-level (texts
split into sentences at ``.``), whitespace-tokenised and case-sensitive, so its values differ from
``rouge_score``'s. Its LCS back-tracking recurses once per token, so long rows raise
``RecursionError`` and score 0.0 there; :func:`rouge_l_f1_pltrdy` reproduces where that happens
(see :data:`PAPER_RECURSION_HEADROOM`) and reports each failure instead of hiding it.

BLEU-1 is ``sacrebleu.metrics.BLEU(max_ngram_order=1).corpus_score(preds, [refs]).score / 100``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache

from textwm._optional import require


@lru_cache(maxsize=1)
def _rouge_tokenize_fn():
    # ``rouge_score.tokenizers.DefaultTokenizer(use_stemmer=False).tokenize`` is exactly
    # ``rouge_score.tokenize.tokenize(text, None)``; that module skips the nltk import (4 s, scipy, sklearn).
    tokenize = require("rouge_score.tokenize", extra="metrics", package="rouge-score")
    return tokenize.tokenize


def rouge_tokenize(text: str) -> list[str]:
    """``rouge_score``'s default tokenisation (no stemming)."""
    return _rouge_tokenize_fn()(text, None)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences.

    Bit-parallel: bit ``i`` of ``v`` tracks row ``i`` of the classic DP table's column
    differences; each token of ``b`` updates all of ``a`` in a few big-integer operations.
    """
    if not a or not b:
        return 0
    match_masks: dict[str, int] = {}
    for i, tok in enumerate(a):
        match_masks[tok] = match_masks.get(tok, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for tok in b:
        u = v & match_masks.get(tok, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure of one pair (``rouge_score`` semantics; 0.0 if either side has no token)."""
    pred_tokens = rouge_tokenize(prediction)
    ref_tokens = rouge_tokenize(reference)
    if not pred_tokens or not ref_tokens:
        return 0.0
    lcs = lcs_length(ref_tokens, pred_tokens)
    precision = lcs / len(pred_tokens)
    recall = lcs / len(ref_tokens)
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


#: ``--rouge-impl`` choices: Google ``rouge-score`` (default) or pltrdy's ``rouge`` (the paper's scripts).
ROUGE_IMPLS = ("rouge_score", "pltrdy")
#: How many nested Python calls fitted below the paper's ``compute_metrics`` before ``RecursionError``:
#: ``python evaluate.py`` -> ``<module>`` -> ``main`` -> ``score_file``/``evaluate_dataset`` ->
#: ``compute_metrics``, CPython 3.11 (the paper's sdar/wedlm setup), default recursion limit 1000,
#: as :func:`_recursion_headroom` measures it there. :func:`rouge_l_f1_pltrdy` gives the library this
#: headroom from wherever it is called, so a long row fails (and scores 0.0) exactly when it did there.
PAPER_RECURSION_HEADROOM = 994


#: Recursion limit that leaves the paper's headroom, per call path (probing costs as much as a short row).
_PAPER_LIMITS: dict[tuple, int] = {}
_MAX_CACHED_PATHS = 64


@lru_cache(maxsize=1)
def _pltrdy_rouge():
    rouge = require("rouge", extra="metrics", package="rouge")
    return rouge.Rouge()  # default metrics (rouge-1, rouge-2, rouge-l): one failing fails the row, as in the paper


def _call_path() -> tuple:
    """The caller's call path, ``(code, last instruction)`` per frame: equal paths use equal recursion depth."""
    frame, path = sys._getframe(1), []
    while frame is not None:
        path.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(path)


def _recursion_headroom() -> int:
    """Nested Python calls that still fit below the caller before ``RecursionError``.

    Probed rather than computed from the frame count: calls that pass through C (``f(*args)``,
    ``map``, pytest's hooks) also use up the limit without leaving a frame of their own.
    """
    def down(n: int) -> int:
        try:
            return down(n + 1)
        except RecursionError:
            return n
    return down(0)


def rouge_l_f1_pltrdy(prediction: str, reference: str) -> tuple[float, str | None]:
    """pltrdy ROUGE-L F of one pair as the paper's evaluate.py computes it; ``(score, error)``.

    ``error`` is ``"ExceptionType: message"`` when the library raised (the score is then 0.0, the
    paper's rule), else None. Empty sides are passed as ``" "`` (two empty sides score ~1.0).
    """
    rouge = _pltrdy_rouge()
    saved = sys.getrecursionlimit()
    path = _call_path()
    try:
        if path in _PAPER_LIMITS:
            sys.setrecursionlimit(_PAPER_LIMITS[path])
        else:
            # Bound the probe (a process may have raised the limit far beyond what the C stack holds), measure
            # the headroom left in this frame, then shift the limit so that exactly the paper's remains.
            sys.setrecursionlimit(min(saved, len(path) + 2 * PAPER_RECURSION_HEADROOM))
            sys.setrecursionlimit(sys.getrecursionlimit() + PAPER_RECURSION_HEADROOM - _recursion_headroom())
            if len(_PAPER_LIMITS) >= _MAX_CACHED_PATHS:
                _PAPER_LIMITS.clear()
            _PAPER_LIMITS[path] = sys.getrecursionlimit()
        try:
            return rouge.get_scores(prediction or " ", reference or " ")[0]["rouge-l"]["f"], None
        except Exception as exc:  # noqa: BLE001 -- the paper scores any failure 0.0; the caller counts, reports
            return 0.0, f"{type(exc).__name__}: {exc}"
    finally:
        sys.setrecursionlimit(saved)


def rouge_l(prediction: str, reference: str, impl: str = "rouge_score") -> tuple[float, str | None]:
    """ROUGE-L F of one pair with implementation ``impl`` (one of :data:`ROUGE_IMPLS`); ``(score, error)``."""
    if impl == "rouge_score":
        return rouge_l_f1(prediction, reference), None
    if impl == "pltrdy":
        return rouge_l_f1_pltrdy(prediction, reference)
    raise ValueError(f"unknown ROUGE implementation {impl!r}; choose one of {', '.join(ROUGE_IMPLS)}")


@lru_cache(maxsize=1)
def _bleu_1_metric():
    metrics = require("sacrebleu.metrics", extra="metrics", package="sacrebleu")
    return metrics.BLEU(max_ngram_order=1)


def bleu_1_row_stats(predictions: Sequence[str], references: Sequence[str]) -> list[list[int]]:
    """sacrebleu's per-row BLEU-1 statistics ``[N, 4]``: prediction length, closest reference length, matched
    unigrams, prediction unigrams (``BLEU._extract_corpus_statistics``). Corpus BLEU-1 is a function of their sum,
    which is what makes it cheap to recompute on resampled rows (as sacrebleu's own ``--confidence`` does)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    return _bleu_1_metric()._extract_corpus_statistics(list(predictions), [list(references)])


def bleu_1_from_stats(stats: Sequence[int]) -> float:
    """Corpus BLEU-1 in [0, 1] from row statistics summed over the corpus (``[4]``; sacrebleu's final step)."""
    return _bleu_1_metric()._compute_score_from_stats([int(x) for x in stats]).score / 100


def bleu_1(predictions: Sequence[str], references: Sequence[str]) -> float | None:
    """Corpus BLEU with unigrams only, in [0, 1]; None for an empty corpus.

    Exactly ``BLEU(max_ngram_order=1).corpus_score(predictions, [references]).score / 100``, which sums the
    row statistics of :func:`bleu_1_row_stats` and applies :func:`bleu_1_from_stats`.
    """
    stats = bleu_1_row_stats(predictions, references)
    if not stats:
        return None
    return bleu_1_from_stats([sum(column) for column in zip(*stats)])
