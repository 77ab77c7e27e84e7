"""From token deltas to text deltas: incremental detokenisation, stop strings, the max_tokens cap, per request.

The worker thread posts each row's newly committed token ids (:class:`RowTokens`, at a decoder step
boundary) to its request's :class:`Submission` through the loop's :class:`LoopMailbox`; the HTTP layer,
streaming or not, reads the submission's :class:`TextDelta` s. So a stream and a plain response are built
from the same deltas: the plain text is the concatenation of the streamed ones.

Delivery is built to cost the worker and the event loop little per step, since both share one GIL and
the worker's step time is what bounds throughput (vLLM's ``AsyncLLM`` output handler follows the same
idea: one hand-off per engine step, outputs processed in a batch, each request's queue woken once):

* the worker appends to a deque and wakes the loop once per burst of events (one ``call_soon_threadsafe``
  per step, not one per row: each is a socket write on the worker's clock);
* the loop detokenises every event of the burst in one callback (:meth:`Submission.receive`), and wakes a
  request's coroutine only when it has something to do with it: a stream at every step with new text, a
  plain request once, when all its rows are done.

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
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from textwm.generation.base import Generation

log = logging.getLogger(__name__)

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
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def text_decoder(tokenizer: Any) -> Callable[[list[int]], str]:
    """``ids -> text`` as ``tokenizer.decode(ids, skip_special_tokens=True)`` gives it, at the least cost.

    A fast (Rust-backed) tokenizer's ``decode`` is its backend's ``decode`` plus, when
    ``clean_up_tokenization_spaces`` is set, a clean-up pass (transformers ``TokenizersBackend._decode``);
    without the clean-up the backend is called directly (a quarter of the cost: the detokeniser decodes
    twice per row per step). Any other tokenizer goes through its own ``decode``.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return lambda ids: backend.decode(ids, skip_special_tokens=True)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


class Detokenizer:
    """Incremental detokenisation of one row's output ids (vLLM's prefix/read offsets over ``decode``).

    ``push(ids)`` returns the text that the new ids make stable; ``flush()`` the rest at the end (a
    trailing split character then decodes as U+FFFD, as a whole-sequence decode does). Each push decodes
    a window of the last emitted ids plus the new ones (a few tokens), never the whole output.

    Args:
        tokenizer: the model's tokenizer.
        decode: ``ids -> text`` (default :func:`text_decoder` of ``tokenizer``; a server builds it once).
    """

    def __init__(self, tokenizer: Any, decode: Callable[[list[int]], str] | None = None):
        self._decode = decode or text_decoder(tokenizer)
        self.ids: list[int] = []
        self._prefix = 0   # first id of the window decoded for context
        self._read = 0     # ids before this one have had their text emitted
        self._before: tuple[int, int, str] = (-1, -1, "")   # (prefix, read, text of ids[prefix:read]), reused

    def _new_text(self, final: bool) -> str:
        if self._before[:2] != (self._prefix, self._read):   # held-back pushes keep the window's start
            self._before = (self._prefix, self._read, self._decode(self.ids[self._prefix:self._read]))
        before = self._before[2]
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

    def __init__(self, tokenizer: Any, stops: list[str], max_tokens: int,
                 decode: Callable[[list[int]], str] | None = None):
        self.detok = Detokenizer(tokenizer, decode)
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


class LoopMailbox:
    """Events from the worker thread to the submissions of one event loop, delivered in bursts.

    :meth:`post` (any thread) appends to a deque and, unless a delivery is already scheduled, schedules one
    with ``loop.call_soon_threadsafe``; the delivery (on the loop) hands every queued event to its
    submission. A step's events for all its rows so cost one loop wake-up, not one per row. The flag is set
    before the deque is emptied, so an event appended during a delivery is never left without one.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._events: deque[tuple[Submission, RowTokens | RowsFailed]] = deque()
        self._scheduled = False
        self._closed = False

    def post(self, submission: Submission, event: RowTokens | RowsFailed) -> None:
        if self._closed:
            return
        self._events.append((submission, event))
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:   # the loop is closed: the server stopped, nobody is waiting
            self._closed = True
            self._events.clear()
            log.debug("dropped events for requests whose event loop is closed")

    def _deliver(self) -> None:
        self._scheduled = False
        while self._events:
            submission, event = self._events.popleft()
            try:
                submission.receive(event)
            except Exception as exc:  # a bug in detokenising one request must not strand it or the others
                log.exception("could not process the decoder's output for a request")
                submission.receive(RowsFailed(exc))


class Submission:
    """One request's rows in the engine, as seen from the event loop.

    The worker's events reach :meth:`receive` on the loop (through a :class:`LoopMailbox`), which turns them
    into text deltas at once; :meth:`delta_batches` / :meth:`deltas` (a stream) and :meth:`texts` (a plain
    response) read them. ``cancel(rows)`` asks the engine to stop decoding rows (a stop string was hit or
    the cap reached, or the client went away: :meth:`close`).

    Args:
        rows: one TextRow per choice, in choice order.
        prompt_tokens: prompt tokens of the request (each prompt counted once, whatever ``n``).
        cancel: called with row indices the engine may stop decoding.
    """

    def __init__(self, rows: list[TextRow], prompt_tokens: int, cancel: Callable[[list[int]], None]):
        self.rows = rows
        self.prompt_tokens = prompt_tokens
        self._cancel = cancel
        self._pending: list[TextDelta] = []     # deltas not read yet, in order
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_each = True                  # wake the reader at every delta (a stream) or only at the end

    @property
    def done(self) -> bool:
        return all(r.done for r in self.rows)

    def receive(self, event: RowTokens | RowsFailed) -> None:
        """Process one event of the worker (on the loop): detokenise, cap, cut at stops; wake the reader."""
        if isinstance(event, RowsFailed):
            if self._error is None and not self.done:
                self._error = event.error
            self._wake(True)
            return
        row = self.rows[event.row]
        if row.done:   # tokens of a step already under way when this row was cut: its finish is sent already
            row.feed(event.token_ids, event.finished)
            return
        text = row.feed(event.token_ids, event.finished)
        if row.done and event.finished is None:
            self._cancel([event.row])  # a stop string or the cap: the decoder need not go on
        if text or row.done:
            self._pending.append(TextDelta(event.row, text, row.finish_reason))
            self._wake(self._wake_each or self.done)

    def _wake(self, now: bool) -> None:
        if now and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def delta_batches(self) -> AsyncIterator[list[TextDelta]]:
        """The text deltas in batches (all that came since the last read) until every row is done; then
        raises the engine's error if its rows failed (after the deltas that came before it)."""
        while True:
            if self._pending:
                batch, self._pending = self._pending, []
                yield batch
            elif self._error is not None:
                raise self._error
            elif self.done:
                return
            else:
                await self._wait()

    async def deltas(self) -> AsyncIterator[TextDelta]:
        """The text deltas one by one (see :meth:`delta_batches`)."""
        async for batch in self.delta_batches():
            for delta in batch:
                yield delta

    async def texts(self) -> list[str]:
        """Every choice's whole text, once all rows are done (the reader is woken once, not per step);
        raises the engine's error if its rows failed."""
        self._wake_each = False
        while not self.done and self._error is None:
            await self._wait()
        if self._error is not None:
            raise self._error
        texts = [""] * len(self.rows)
        for d in self._pending:
            texts[d.index] += d.text
        self._pending = []
        return texts

    def close(self) -> None:
        """Cancel the rows still decoding (the client went away or the response is complete)."""
        left = [i for i, r in enumerate(self.rows) if not r.done]
        if left:
            self._cancel(left)

    def completion_tokens(self) -> int:
        return sum(r.tokens for r in self.rows)

    def decoder_forwards(self) -> int:
        return max((r.generation.num_forwards for r in self.rows if r.generation is not None), default=0)
