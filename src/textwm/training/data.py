"""From chat rows to training rows: tokenisation, truncation, block padding, packing, collation.

A sample is (prompt tokens, answer tokens). The prompt is the checkpoint's chat template over all
messages but the last, with the generation prompt (``enable_thinking=False``); the answer is the
last message's content followed by the template's end-of-turn text (e.g. ``<|im_end|>\\n``), so the
model learns to stop. Prompt tokens are never trained (label -100).

For the SDAR objective each sample is right-padded to a multiple of the block size with the pad
token, and the padding is labelled (the model learns to fill its last block). Rows hold one
sample, or with packing several, each with position ids restarting at 0 and its own sample id
(attention never crosses samples; see :mod:`textwm.diffusion.masks`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from textwm.data.chat_encoder import ChatEncoder
from textwm.diffusion.masks import PAD_SAMPLE
from textwm.diffusion.sdar import IGNORE_INDEX, block_pad_length

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    answer_ids: list[int]
    #: Index of the source row (noise seeds and error messages refer to it).
    index: int

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.answer_ids)


@dataclass
class EncodeReport:
    samples: list[Sample] = field(default_factory=list)
    dropped_too_long: int = 0
    truncated: int = 0

    def summary(self) -> str:
        return (f"{len(self.samples)} samples, {self.dropped_too_long} dropped (longer than cutoff_len), "
                f"{self.truncated} prompts cut to fit")


def encode_rows(rows: Sequence[dict], encoder: ChatEncoder, *, cutoff_len: int, truncate_mode: str,
                block_size: int | None) -> EncodeReport:
    """Tokenise validated chat rows; enforce ``cutoff_len`` (after block padding, for SDAR).

    ``truncate_mode="drop"`` drops a too-long sample; ``"cut"`` removes tokens from the start of
    its prompt (the system prompt goes first, the action and the generation prompt at the end are
    kept). A sample whose answer alone exceeds ``cutoff_len`` is always dropped. Both are counted.
    """
    report = EncodeReport()
    for index, row in enumerate(rows):
        prompt, answer = encoder.encode(row["messages"])
        pad = block_pad_length(len(prompt) + len(answer), block_size) if block_size else 0
        total = len(prompt) + len(answer) + pad
        if total > cutoff_len:
            room = cutoff_len - len(answer)
            if truncate_mode == "drop" or room < 1:
                report.dropped_too_long += 1
                continue
            prompt = prompt[len(prompt) - room:]
            pad = block_pad_length(len(prompt) + len(answer), block_size) if block_size else 0
            while prompt and len(prompt) + len(answer) + pad > cutoff_len:  # block padding can push it over again
                prompt = prompt[1:]
                pad = block_pad_length(len(prompt) + len(answer), block_size)
            if len(prompt) + len(answer) + pad > cutoff_len:    # the answer and its block padding alone are too long
                report.dropped_too_long += 1
                continue
            report.truncated += 1
        if pad:
            answer = answer + [encoder.tokenizer.pad_token_id] * pad
        report.samples.append(Sample(prompt_ids=prompt, answer_ids=answer, index=index))
    if report.dropped_too_long or report.truncated:
        log.warning("cutoff_len %d: %s", cutoff_len, report.summary())
    return report


@dataclass
class TrainingRow:
    """One row of a batch: one sample, or several packed. All lists have the row's length."""

    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    sample_ids: list[int] = field(default_factory=list)
    #: Source-row index of each sample in the row (sample id i -> sample_indices[i]).
    sample_indices: list[int] = field(default_factory=list)

    def add(self, sample: Sample) -> None:
        sid = len(self.sample_indices)
        self.input_ids += sample.prompt_ids + sample.answer_ids
        self.labels += [IGNORE_INDEX] * len(sample.prompt_ids) + sample.answer_ids
        self.position_ids += list(range(len(sample)))
        self.sample_ids += [sid] * len(sample)
        self.sample_indices.append(sample.index)

    def __len__(self) -> int:
        return len(self.input_ids)


def build_rows(samples: Sequence[Sample], *, max_len: int, packing: bool) -> list[TrainingRow]:
    """One row per sample, or first-fit-decreasing packing into rows of at most ``max_len`` tokens."""
    if not packing:
        rows = []
        for s in samples:
            row = TrainingRow()
            row.add(s)
            rows.append(row)
        return rows
    rows: list[TrainingRow] = []
    for s in sorted(samples, key=len, reverse=True):
        for row in rows:
            if len(row) + len(s) <= max_len:
                row.add(s)
                break
        else:
            row = TrainingRow()
            row.add(s)
            rows.append(row)
    return rows


class TrainingRows(torch.utils.data.Dataset):
    """Rows plus the epoch, from which each sample's noise seed is derived."""

    def __init__(self, rows: list[TrainingRow], seed: int):
        self.rows = rows
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.rows)

    def noise_seed(self, sample_index: int) -> int:
        """A seed per (run seed, epoch, sample): the same sample gets fresh noise every epoch, and the
        noise does not depend on batch size, accumulation or the number of devices."""
        return hash((self.seed, self.epoch, sample_index)) & 0x7FFF_FFFF

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {"input_ids": row.input_ids, "labels": row.labels, "position_ids": row.position_ids,
                "sample_ids": row.sample_ids, "noise_seeds": [self.noise_seed(j) for j in row.sample_indices]}


def count_tokens(rows: Sequence[TrainingRow]) -> tuple[int, int]:
    """(all tokens, answer tokens) over rows."""
    return sum(len(r) for r in rows), sum(sum(label != IGNORE_INDEX for label in r.labels) for r in rows)


def noisy_copy_tokens(row: TrainingRow, block_size: int) -> int:
    """Tokens of ``row`` in (sample, block) groups that hold an answer token: the most of the row's noisy copy
    an SDAR / WeDLM step computes (:mod:`textwm.diffusion.noisy_stream`; only answer tokens are masked)."""
    groups: dict[tuple[int, int], list[int]] = {}         # (sample, block) -> [tokens, answer tokens]
    for label, position, sample in zip(row.labels, row.position_ids, row.sample_ids):
        group = groups.setdefault((sample, position // block_size), [0, 0])
        group[0] += 1
        group[1] += label != IGNORE_INDEX
    return sum(tokens for tokens, answers in groups.values() if answers)


def pad_batch(features: Sequence[dict[str, Any]], *, pad_token_id: int, multiple_of: int = 1) -> dict[str, torch.Tensor]:
    """Stack rows into ``[B, L]`` tensors, right-padding to the longest row (rounded up to ``multiple_of``).

    Padding has pad tokens, label -100, position 0 and sample id :data:`PAD_SAMPLE`.
    """
    longest = max(len(f["input_ids"]) for f in features)
    length = -(-longest // multiple_of) * multiple_of
    fills = {"input_ids": pad_token_id, "labels": IGNORE_INDEX, "position_ids": 0, "sample_ids": PAD_SAMPLE}
    batch = {}
    for key, fill in fills.items():
        batch[key] = torch.tensor([f[key] + [fill] * (length - len(f[key])) for f in features], dtype=torch.long)
    return batch
