"""Anchored answers: a response template of fixed spans kept verbatim and slots the model fills.

A template is what a request sends as ``response_template``: ``["You arrive at the countertop 1. On the
countertop 1, you see ", {"fill": 24}, "."]``. Fixed strings are kept byte for byte; a slot ``{"fill": N}``
holds at most N generated tokens; the last slot may leave N out, and then ends at a stop id or at the
request's token budget. The answer is the template with its slots filled; only slot tokens count as generated.

Each family decodes a template its own way (:func:`textwm.generation.sdar.SDARDecoder.generate_anchored`,
:func:`textwm.generation.ar.ARDecoder.generate_anchored`), over one :class:`Layout` per row:

* **the canvas**: the answer's token positions, fixed tokens in place and every slot N positions wide (an open
  last slot: the budget left). A block-diffusion model sees the anchors on both sides of a slot while it fills
  it; an AR model can only be forced at each anchor as it comes.
* **a slot's end**: a slot is N positions; its content is what the model put there up to its first stop id
  (the model ends a slot early by writing a stop id; the rest of the slot is dropped). So a slot's length is
  chosen by the model within N, while every anchor stays at a position known before decoding, which is what
  lets a diffusion decoder place all of them first.

**Where a fixed string ends.** A BPE tokenizer writes a space with the word after it (``" see", " a",
" mug"``), so a fixed string that ends in whitespace before a slot (``"... you see "``) is encoded with a lone
space token the model never saw in training at that place, and it fills the slot badly (measured: a world model
fine-tuned from SmolLM2-135M matched 0 of 460 ALFWorld listings framed so, against about half unanchored).
:func:`words_first` moves such whitespace into the slot; the env frames go through it
(:class:`textwm.envs.simulator.Simulator`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: A template's parts: a fixed string, or a slot of at most ``fill`` tokens (``None``: open, the last one only).
Part = str | int | None


class TemplateError(ValueError):
    """A response template that cannot be decoded; the message names the item and what is wrong."""


@dataclass(frozen=True)
class Template:
    """A parsed template: ``parts`` alternate freely between fixed strings and slot sizes (``int`` or ``None``)."""

    parts: tuple[Part, ...]

    @property
    def slots(self) -> list[int | None]:
        return [p for p in self.parts if not isinstance(p, str)]

    @property
    def open_tail(self) -> bool:
        return self.parts[-1] is None

    @property
    def closed_tokens(self) -> int:
        """Tokens the sized slots hold at most."""
        return sum(s for s in self.slots if s is not None)


def parse_template(raw: Any, *, max_tokens: int | None = None, where: str = "response_template") -> Template:
    """Check a request's template and return it parsed; :class:`TemplateError` names the offending item.

    Rules: a non-empty list of non-empty strings and ``{"fill": N}`` objects (N a positive integer, left out only
    on the last item), at least one slot, no two slots in a row, and the slots' sizes within ``max_tokens`` when
    it is given.
    """
    if not isinstance(raw, list) or not raw:
        raise TemplateError(f"{where} must be a non-empty list of strings and {{\"fill\": N}} slots")
    parts: list[Part] = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if isinstance(item, str):
            if not item:
                raise TemplateError(f"{here} is an empty string (leave it out)")
            parts.append(item)
        elif isinstance(item, dict):
            if set(item) - {"fill"}:
                raise TemplateError(f"{here} has unknown keys {sorted(set(item) - {'fill'})}; a slot is "
                                    "{\"fill\": N}")
            size = item.get("fill")
            if size is None:
                if i != len(raw) - 1:
                    raise TemplateError(f"{here} leaves out its size; only the last slot may (it then ends at a "
                                        "stop or at max_tokens)")
            elif isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise TemplateError(f"{here}: fill must be a positive integer, got {size!r}")
            if parts and not isinstance(parts[-1], str):
                raise TemplateError(f"{here} follows another slot; merge them into one (a slot ends where the "
                                    "next fixed string starts)")
            parts.append(size)
        else:
            raise TemplateError(f"{here} must be a string or {{\"fill\": N}}, got {type(item).__name__}")
    template = Template(tuple(parts))
    if not template.slots:
        raise TemplateError(f"{where} has no slot ({{\"fill\": N}}): nothing for the model to generate")
    closed = template.closed_tokens
    if max_tokens is not None and (closed > max_tokens or (template.open_tail and closed >= max_tokens)):
        raise TemplateError(f"{where}'s slots need {closed} tokens{' and more' if template.open_tail else ''}, "
                            f"more than max_tokens={max_tokens}")
    return template


def words_first(parts: Sequence[Any]) -> list[Any]:
    """A raw template (a list of fixed strings and ``{"fill": N}`` slots) whose fixed strings end without the
    whitespace they had before a slot: the slot writes it, with the word it belongs to (module docstring), and
    grows by one token for it. A string that is all whitespace is left out."""
    out: list[Any] = []
    grow = False
    for i, part in enumerate(parts):
        if isinstance(part, str):
            before_slot = i + 1 < len(parts) and isinstance(parts[i + 1], dict)
            trimmed = part.rstrip() if before_slot else part
            grow = trimmed != part
            if trimmed:
                out.append(trimmed)
        else:
            size = part.get("fill")
            out.append({**part, "fill": size + 1} if grow and size is not None else part)
            grow = False
    return out


@dataclass
class Layout:
    """One row's canvas: ``fixed[i]`` is the token at answer position ``i``, or ``None`` where a slot is.

    ``spans`` gives each part's ``(start, end)`` on the canvas, in template order; ``open_from`` is where an open
    last slot starts (``len(fixed)`` when the template has none): a stop id there ends the answer.
    """

    template: Template
    fixed: list[int | None]
    spans: list[tuple[int, int]]
    open_from: int

    def __len__(self) -> int:
        return len(self.fixed)


def lay_out(template: Template, encode: Callable[[str], list[int]], budget: int) -> Layout:
    """The canvas of ``template``: fixed strings as ``encode`` tokenises them, slots N wide, an open last slot
    ``budget`` minus the closed slots' tokens wide."""
    fixed: list[int | None] = []
    spans = []
    open_from = None
    for part in template.parts:
        start = len(fixed)
        if isinstance(part, str):
            fixed.extend(encode(part))
        else:
            if part is None:
                open_from = start
            fixed.extend([None] * (part if part is not None else budget - template.closed_tokens))
        spans.append((start, len(fixed)))
    return Layout(template, fixed, spans, len(fixed) if open_from is None else open_from)


@dataclass
class AnchoredAnswer:
    """A filled template: ``text`` (fixed strings verbatim, slots decoded), each slot's tokens."""

    text: str
    slot_token_ids: list[list[int]]
    #: "stop" (the open last slot ended at a stop id, or every slot is closed) or "length" (the budget ran out).
    finish_reason: str
    num_forwards: int = 0

    @property
    def completion_tokens(self) -> int:
        """Slot tokens generated (what a request's usage counts)."""
        return sum(len(t) for t in self.slot_token_ids)


def slots_of(layout: Layout, canvas: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[list[int]], str]:
    """Each slot's tokens in a decoded ``canvas`` (token ids at the layout's positions; shorter when the open
    last slot ended early), up to the slot's first stop id; and the finish reason."""
    stops = set(stop_ids)
    slots, finish = [], "stop"
    for part, (start, end) in zip(layout.template.parts, layout.spans):
        if isinstance(part, str):
            continue
        tokens = []
        for tok in canvas[start:end]:
            if tok in stops:
                break
            tokens.append(tok)
        else:
            if part is None and len(canvas) >= end:
                finish = "length"             # the open slot filled its budget without a stop
        slots.append(tokens)
    return slots, finish


def answer(layout: Layout, slots: list[list[int]], decode: Callable[[list[int]], str], finish: str,
           num_forwards: int = 0) -> AnchoredAnswer:
    """The filled template: fixed strings as the template wrote them (byte for byte), slots decoded."""
    text, filled = [], iter(slots)
    for part in layout.template.parts:
        text.append(part if isinstance(part, str) else decode(next(filled)))
    return AnchoredAnswer("".join(text), slots, finish, num_forwards)
