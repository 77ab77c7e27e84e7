"""From token deltas to text deltas: incremental detokenisation, stop strings, the max_tokens cap, per request.

The worker thread posts each row's newly committed token ids (:class:`RowTokens`, at a decoder step
boundary) to its request's :class:`Submission` on the event loop; the HTTP layer, streaming or not,
iterates the submission's :class:`TextDelta` s. So a stream and a plain response are built from the
same deltas: the plain text is the concatenation of the streamed ones.

Rules (each from the upstream it follows):

* Text is emitted only once stable (:class:`Detokenizer`): vLLM's ``detokenize_incrementally``
  (``vllm/transformers_utils/detokenizer_utils.py``) decodes a short window of tokens twice, without
  and with the new ones, and emits the difference unless it ends in U+FFFD (a character whose UTF-8
  bytes are split over tokens, or a multi-token character, is held back until it is whole).
* A stop string ends the choice, and no text after it is ever sent; text that could be the start of
  a stop string is held back until it cannot (vLLM ``StopChecker`` / ``detokenizer`` hold back
  ``len(stop) - 1`` characters; here exactly the longest suffix that is a prefix of a stop string).
  The cut is at the earliest occurrence of any stop string, as the non-stream response always did.
* ``max_tokens`` is an exact cap: block decoders commit whole blocks, so a step may overshoot;
  tokens past the cap are dropped and the choice ends with ``length``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from textwm.generation.base import Generation

#: A character whose bytes are not all decoded yet renders as this (the tokenizers' replacement character).
REPLACEMENT = "\ufffd"
DONE_EVENT = "data: [DONE]\n\n"


@dataclass
class RowTokens:
    """Token ids a row committed in one decoder step (from the worker thread); ``finished`` when it is done."""

    row: int
    token_ids: list[int]
    finished: Generation | None = None


@dataclass
class RowsFailed:
    """The decoder failed the request's rows (``error``: a DecodeFailed or RequestError of the engine)."""

    error: BaseException


@dataclass
class TextDelta:
    """New text of choice ``index``; ``finish_reason`` is set on its last delta."""

    index: int
    text: str
    finish_reason: str | None = None


def sse(payload: Any) -> str:
    """One server-sent event of JSON data."""
    import json

    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


class Detokenizer:
    """Incremental detokenisation of one row's output ids (vLLM's prefix/read offsets over ``decode``).

    ``push(ids)`` returns the text that the new ids make stable; ``flush()`` the rest at the end (a
    trailing split character then decodes as U+FFFD, as a whole-sequence decode does).
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0   # first id of the window decoded for context
        self._read = 0     # ids before this one have had their text emitted

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _new_text(self, final: bool) -> str:
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        if len(after) <= len(before) or (after.endswith(REPLACEMENT) and not final):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before):]

    def push(self, ids: list[int]) -> str:
        if not ids:
            return ""
        self.ids.extend(ids)
        return self._new_text(final=False)

    def flush(self) -> str:
        return self._new_text(final=True) if self._read < len(self.ids) else ""


class TextRow:
    """One choice's text: detokenised, capped at ``max_tokens``, cut at the first stop string.

    ``feed`` takes a step's token ids (and the row's Generation once the decoder is done with it)
    and returns the text that may be sent now and, on the last call, the finish reason.
    """

    def __init__(self, tokenizer: Any, stops: list[str], max_tokens: int):
        self.detok = Detokenizer(tokenizer)
        self.stops = stops
        self.max_tokens = max_tokens
        self.tokens = 0
        self.pending = ""                    # stable text held back: it could begin a stop string
        self.finish_reason: str | None = None
        self.generation: Generation | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def feed(self, token_ids: list[int], finished: Generation | None) -> str:
        if finished is not None:
            self.generation = finished   # its forward count, even for a row already cut by a stop string
        if self.done:
            return ""
        room = self.max_tokens - self.tokens
        taken = token_ids[:room]
        capped = len(token_ids) > room
        self.tokens += len(taken)
        text = self.detok.push(taken)
        ending = capped or finished is not None
        if ending:
            text += self.detok.flush()
        out = self._release(text)
        if self.done:
            return out
        if ending:
            out += self.pending
            self.pending = ""
            self.finish_reason = "length" if capped else ("stop" if finished.finish_reason == "stop" else "length")
        return out

    def _release(self, text: str) -> str:
        """Append ``text`` to the held-back text; return what can be sent (sets finish_reason on a stop)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.pending = self.pending[:min(hits)], ""
            self.finish_reason = "stop"
            return out
        keep = self._stop_prefix_start(self.pending)
        out, self.pending = self.pending[:keep], self.pending[keep:]
        return out

    def _stop_prefix_start(self, text: str) -> int:
        """The first index ``i`` where ``text[i:]`` is a proper prefix of a stop string (``len(text)``: none)."""
        longest = max(len(s) for s in self.stops)
        for i in range(max(0, len(text) - longest + 1), len(text)):
            tail = text[i:]
            if any(s.startswith(tail) for s in self.stops):
                return i
        return len(text)


class Submission:
    """One request's rows in the engine, as seen from the event loop.

    The worker thread puts :class:`RowTokens` / :class:`RowsFailed` on ``inbox`` (through
    ``loop.call_soon_threadsafe``); :meth:`deltas` turns them into text deltas. ``cancel(rows)`` asks the
    engine to stop decoding rows (a stop string was hit, or the client went away: :meth:`close`).

    Args:
        rows: one TextRow per choice, in choice order.
        prompt_tokens: prompt tokens of the request (each prompt counted once, whatever ``n``).
        cancel: called with row indices the engine may stop decoding.
    """

    def __init__(self, rows: list[TextRow], prompt_tokens: int, cancel: Callable[[list[int]], None]):
        self.rows = rows
        self.prompt_tokens = prompt_tokens
        self.inbox: asyncio.Queue[RowTokens | RowsFailed] = asyncio.Queue()
        self._cancel = cancel

    @property
    def done(self) -> bool:
        return all(r.done for r in self.rows)

    async def deltas(self) -> AsyncIterator[TextDelta]:
        """Text deltas until every row is done; raises the engine's error when its rows failed."""
        while not self.done:
            event = await self.inbox.get()
            if isinstance(event, RowsFailed):
                raise event.error
            row = self.rows[event.row]
            was_done = row.done   # tokens of a step already under way when this row was cut: finish already sent
            text = row.feed(event.token_ids, event.finished)
            if was_done:
                continue
            if row.done and event.finished is None:
                self._cancel([event.row])  # a stop string or the cap: the decoder need not go on
            if text or row.done:
                yield TextDelta(event.row, text, row.finish_reason)

    def close(self) -> None:
        """Cancel the rows still decoding (the client went away or the response is complete)."""
        left = [i for i, r in enumerate(self.rows) if not r.done]
        if left:
            self._cancel(left)

    def completion_tokens(self) -> int:
        return sum(r.tokens for r in self.rows)

    def decoder_forwards(self) -> int:
        return max((r.generation.num_forwards for r in self.rows if r.generation is not None), default=0)
