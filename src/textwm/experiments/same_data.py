"""The comparison's check that arms trained on the same data: the trainer's digest of the answer tokens in
training order (``TrainResult.data_digest``) and their count must be equal, or the run stops naming the arms."""

from __future__ import annotations

from typing import Any

from textwm.experiments.common import ComparisonError


def _same(what: str, seen: dict[str, tuple[str, int]]) -> str:
    """One line saying that the arms of ``seen`` ({arm: (digest, answer tokens)}) saw the same data; raises
    :class:`ComparisonError` naming each arm's count and digest when they did not."""
    if len(set(seen.values())) > 1:
        detail = "; ".join(f"{name}: {tokens} answer tokens, digest {digest[:12]}" for name, (digest, tokens) in seen.items())
        raise ComparisonError(f"{what} did not train on the same data in the same order ({detail})")
    (digest, tokens), = set(seen.values())
    return f"{', '.join(seen)} saw the same {tokens} answer tokens in the same order (digest {digest[:12]})"


def check_same_data(records: dict[str, dict[str, Any]], arms: list[Any]) -> list[str]:
    """Arms of a regime that start from the same point saw the same answer tokens in the same order.

    Returns one line per group checked; raises :class:`ComparisonError` naming the arms that differ."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for arm in arms:
        groups.setdefault((arm.regime, arm.start), []).append(arm)
    return [f"{regime} from {start}: " + _same(f"{regime} arms from {start}", {
        a.name: (records[a.name]["data_digest"], records[a.name]["answer_tokens_seen"]) for a in members})
        for (regime, start), members in groups.items()]


def check_same_epochs(records: dict[str, dict[str, Any]]) -> list[str]:
    """Pretrained-regime arms saw the same answer tokens in the same order in every epoch they all trained."""
    common = min(len(r["epochs"]) for r in records.values())
    return [f"pretrained, epoch {k + 1}: " + _same(f"pretrained arms in epoch {k + 1}", {
        name: (r["epochs"][k]["data_digest"], r["epochs"][k]["answer_tokens_seen"]) for name, r in records.items()})
        for k in range(common)]
