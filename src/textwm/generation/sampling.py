"""Token sampling for the decoders: temperature, top-k, top-p, confidence and entropy.

Conventions of :func:`sample` (AR and SDAR; JetAstra/SDAR ``generate.py``): the caller sets banned logits
(the mask token) to -inf first; ``temperature == 0`` is greedy (argmax, confidence = softmax
probability of the argmax); otherwise logits are divided by the temperature, filtered by top-k then
top-p, and the token is drawn from the resulting distribution, whose probability of that token is
the confidence.

WeDLM samples in Tencent/WeDLM's order instead (:func:`sample_filter_first`, from
``wedlm/engine/sampler.py`` ``Sampler.sample_tokens``): top-k, then top-p on the *unscaled*
logits, then the temperature; and it scores positions by the entropy of the raw logits
(:func:`logits_entropy`, ``Sampler.compute_entropy``), not of the sampling distribution.

Per-row settings (the decode engine's rows each carry their request's own): :func:`sample_rows` and
:func:`sample_filter_first_rows` take a :class:`RowParams` (temperature, top-k, top-p per row, as device
tensors) and give, row by row, what :func:`sample` / :func:`sample_filter_first` give with that row's
settings. The form is vLLM's and lmdeploy's per-request sampling: parameter tensors over the batch plus
host-side facts about them that pick the path without reading the device (vLLM ``vllm/v1/sample/sampler.py``
``Sampler.sample``: ``all_greedy`` returns the argmax, else greedy rows take the argmax through a
``torch.where`` on the temperature; lmdeploy ``pytorch/engine/logits_process.py`` ``SamplingInputs.max_top_k``
and ``FusedLogitsProcessor.sampling``). One draw covers every row, so with the same generator state a sampled row
draws what it would in a batch of rows with its own settings.

Drawing (:func:`draw`): the scalar samplers draw with ``torch.multinomial`` by default, as the upstream decoders do
(seeded runs equal theirs); the per-row samplers, which the decode engine runs every step, draw by the exponential
race, ``argmax(probs / E)`` with ``E ~ Exp(1)``: the same categorical distribution, but on CUDA no device-to-host
synchronisation (``torch.multinomial`` waits for the device; gpt-fast and vLLM draw the same way for that reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class Sampled:
    tokens: torch.Tensor       # [N] long
    confidence: torch.Tensor   # [N] probability of the chosen token
    probs: torch.Tensor        # [N, V] the distribution it was drawn from


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (``k <= 0``: keep all)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_k_filter_rows(logits: torch.Tensor, k: torch.Tensor, k_max: int) -> torch.Tensor:
    """:func:`top_k_filter` with each row's own ``k [N]`` (``<= 0``: keep all) over ``logits [N, V]``.

    ``k_max`` is the largest ``k`` of the rows (known on the host; ``<= 0``: no row filters), so one
    ``topk`` of that width gives every row its ``k``-th largest logit (lmdeploy ``FusedLogitsProcessor.sampling``
    takes ``max_top_k`` the same way).
    """
    k_max = min(k_max, logits.shape[-1])
    if k_max <= 0:
        return logits
    top = torch.topk(logits, k_max, dim=-1).values                                  # [N, k_max]
    kth = top.gather(-1, (k.clamp(1, k_max) - 1)[:, None])
    return logits.masked_fill((logits < kth) & (k > 0)[:, None], float("-inf"))


def _nucleus_drop(logits: torch.Tensor, p: float | torch.Tensor) -> torch.Tensor:
    """``[N, V]`` bool: the tokens outside the smallest top set whose probability reaches ``p`` (a float, or
    ``[N, 1]``); the token that crosses ``p`` is kept, and so is the top token."""
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative > p
    drop_sorted[..., 1:] = drop_sorted[..., :-1].clone()  # keep the token that crosses p
    drop_sorted[..., 0] = False
    return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: the smallest set of top tokens whose probability reaches ``p`` (``p >= 1``: all)."""
    if p >= 1.0:
        return logits
    return logits.masked_fill(_nucleus_drop(logits, p), float("-inf"))


def top_p_filter_rows(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """:func:`top_p_filter` with each row's own ``p [N]`` over ``logits [N, V]`` (rows with ``p >= 1`` keep all,
    as the scalar filter: a cumulative sum that rounds past 1 drops nothing there)."""
    p = p[:, None]
    return logits.masked_fill(_nucleus_drop(logits, p) & (p < 1.0), float("-inf"))


@dataclass(frozen=True)
class RowParams:
    """The sampling settings of ``N`` rows: device tensors, and host-side facts that choose the path.

    ``temperature [N]`` float32 (0: greedy), ``top_k [N]`` long (``<= 0``: off), ``top_p [N]`` float32
    (``>= 1``: off); a greedy row's filters are ignored. The flags cover the rows whose tokens are read (the
    engine's active rows) and are what the host knows: ``all_greedy`` (one argmax, as :func:`sample` at
    temperature 0), ``top_k_max`` (the widest top-k of a sampled row; 0: none) and ``any_top_p`` (a sampled
    row has ``top_p < 1``). Rows outside them (an idle row inside the engine's bucket) may get any token.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    all_greedy: bool
    top_k_max: int
    any_top_p: bool

    @staticmethod
    def flags(settings: Sequence[tuple[float, int, float]]) -> dict[str, bool | int]:
        """The host-side fields for rows with ``(temperature, top_k, top_p)`` settings."""
        sampled = [(k, p) for t, k, p in settings if t > 0]
        return {"all_greedy": not sampled, "top_k_max": max((k for k, _ in sampled), default=0),
                "any_top_p": any(p < 1.0 for _, p in sampled)}

    @classmethod
    def of(cls, settings: Sequence[tuple[float, int, float]], device: torch.device | str = "cpu") -> RowParams:
        """Rows with these ``(temperature, top_k, top_p)`` settings, one tuple per row."""
        t, k, p = zip(*settings) if settings else ((), (), ())
        return cls(temperature=torch.tensor(t, dtype=torch.float32, device=device),
                   top_k=torch.tensor(k, dtype=torch.long, device=device),
                   top_p=torch.tensor(p, dtype=torch.float32, device=device), **cls.flags(settings))

    def take(self, rows: torch.Tensor) -> RowParams:
        """The settings of rows ``rows [M]`` (long indices), in that order."""
        return replace(self, temperature=self.temperature[rows], top_k=self.top_k[rows], top_p=self.top_p[rows])

    def repeat(self, n: int) -> RowParams:
        """Each row ``n`` times in a row: the settings of ``[N, n]`` positions flattened row-major."""
        return replace(self, temperature=self.temperature.repeat_interleave(n),
                       top_k=self.top_k.repeat_interleave(n), top_p=self.top_p.repeat_interleave(n))

    def divisor(self) -> torch.Tensor:
        """``[N, 1]``: the temperature to divide a row's logits by (1 for greedy rows, which are not scaled)."""
        t = self.temperature
        return torch.where(t > 0, t, torch.ones_like(t))[:, None]

    def filter(self, logits: torch.Tensor) -> torch.Tensor:
        """Top-k then top-p of the sampled rows of ``logits [N, V]`` (greedy rows are left whole)."""
        sampled = self.temperature > 0
        if self.top_k_max > 0:
            logits = top_k_filter_rows(logits, torch.where(sampled, self.top_k, 0), self.top_k_max)
        if self.any_top_p:
            logits = top_p_filter_rows(logits, torch.where(sampled, self.top_p, 1.0))
        return logits


#: How a token is drawn from a distribution (:func:`draw`).
DRAWS = ("multinomial", "race")


def draw(probs: torch.Tensor, *, generator: torch.Generator | None = None, how: str = "multinomial") -> torch.Tensor:
    """One token per row of ``probs [N, V]`` (rows summing to 1), ``[N]`` long. ``multinomial``: torch's, as the
    upstream decoders draw; ``race``: ``argmax(probs / E)``, ``E [N, V] ~ Exp(1)`` drawn from ``generator`` in
    row-major order, the same distribution without a device-to-host synchronisation."""
    if how == "multinomial":
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    if how == "race":
        # An exponential of exactly 0 would make 0 / 0 = NaN for a zero-probability token, which argmax would pick.
        race = torch.empty_like(probs).exponential_(generator=generator).clamp_min_(torch.finfo(probs.dtype).tiny)
        return (probs / race).argmax(dim=-1)
    raise ValueError(f"draw must be one of {', '.join(DRAWS)}, got {how!r}")


def sample(logits: torch.Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None, how: str = "multinomial") -> Sampled:
    """Sample one token per row of ``logits [N, V]`` (computed in float32; ``how``: :func:`draw`'s)."""
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        scaled = top_p_filter(top_k_filter(logits / temperature, top_k), top_p)
        probs = torch.softmax(scaled, dim=-1)
        tokens = draw(probs, generator=generator, how=how)
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def sample_filter_first(logits: torch.Tensor, *, temperature: float, top_k: int = 0, top_p: float = 1.0,
                        generator: torch.Generator | None = None, how: str = "multinomial") -> Sampled:
    """Sample one token per row of ``logits [N, V]`` in WeDLM's order (computed in float32).

    Tencent/WeDLM ``wedlm/engine/sampler.py`` ``Sampler.sample_tokens``: ``temperature == 0`` is
    the argmax of the softmax (top-k and top-p ignored); otherwise top-k, then top-p on the unscaled
    logits, then division by the temperature, then a draw. Top-p before the temperature differs from
    :func:`sample` whenever ``top_p < 1`` and ``temperature != 1`` (the nucleus is taken on a
    different distribution). ``probs`` is the distribution drawn from (greedy: the raw softmax).
    """
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)
        tokens = probs.argmax(dim=-1)
    else:
        probs = torch.softmax(top_p_filter(top_k_filter(logits, top_k), top_p) / temperature, dim=-1)
        tokens = draw(probs, generator=generator, how=how)
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def sample_rows(logits: torch.Tensor, rows: RowParams, *, generator: torch.Generator | None = None) -> Sampled:
    """:func:`sample` with each row's own settings: one token per row of ``logits [N, V]`` (``rows`` over ``N``).

    A greedy row takes the argmax of its float32 logits and the softmax of them as its distribution, as
    :func:`sample` at temperature 0; a sampled row is divided by its temperature, filtered by its top-k then
    top-p and drawn by the exponential race (:func:`draw`; :func:`sample` with ``how="race"`` draws the same).
    All-greedy rows (``rows.all_greedy``, known on the host) cost one softmax and argmax, as :func:`sample` does.
    """
    if rows.all_greedy:
        return sample(logits, temperature=0)
    logits = logits.float()
    probs = torch.softmax(rows.filter(logits / rows.divisor()), dim=-1)
    drawn = draw(probs, generator=generator, how="race")
    tokens = torch.where(rows.temperature > 0, drawn, logits.argmax(dim=-1))
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def sample_filter_first_rows(logits: torch.Tensor, rows: RowParams, *,
                             generator: torch.Generator | None = None) -> Sampled:
    """:func:`sample_filter_first` (WeDLM's order) with each row's own settings, over ``logits [N, V]``.

    A sampled row: top-k, top-p on the unscaled logits, then its temperature, then the draw (the exponential race,
    :func:`draw`); a greedy row: the argmax of the raw softmax. All-greedy rows take :func:`sample_filter_first`'s
    greedy path.
    """
    if rows.all_greedy:
        return sample_filter_first(logits, temperature=0)
    logits = logits.float()
    probs = torch.softmax(rows.filter(logits) / rows.divisor(), dim=-1)
    drawn = draw(probs, generator=generator, how="race")
    tokens = torch.where(rows.temperature > 0, drawn, probs.argmax(dim=-1))
    return Sampled(tokens=tokens, confidence=probs.gather(-1, tokens[:, None]).squeeze(-1), probs=probs)


def logits_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of ``softmax(logits)`` per row of ``logits [N, V]``, in float32.

    The entropy of the model's own distribution, before any temperature or filter (Tencent/WeDLM
    ``Sampler.compute_entropy``: ``Categorical(logits=...).entropy()``); ``-inf`` logits add 0.
    """
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return -(log_p.exp() * log_p.clamp(min=torch.finfo(log_p.dtype).min)).sum(dim=-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row of ``probs [N, V]`` over the full distribution."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float | torch.Tensor) -> torch.Tensor:
    """CTRL-style penalty (Keskar et al., 2019; HF ``RepetitionPenaltyLogitsProcessor``).

    Logits of tokens already in the context are divided by ``penalty`` when positive and
    multiplied by it when negative. ``logits [R, B, V]``, ``seen [R, V]`` bool; ``penalty`` one float
    for every row, or ``[R]`` per row (lmdeploy ``_process_repetition_penalty_`` takes one per request):
    a row at 1.0 is left as it is (division and product by 1 are exact).
    """
    if isinstance(penalty, torch.Tensor):
        penalty = penalty.to(logits.dtype)[:, None, None]
    elif penalty == 1.0:
        return logits
    seen = seen[:, None, :].expand_as(logits)
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)
