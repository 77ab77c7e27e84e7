"""The worker-to-loop delivery of textwm.serving.streaming: bursts of events, one wake-up per plain request,
the fast decode path, and stream chunks in the protocol's shape."""

import asyncio
import json
import threading

import pytest
from transformers import AutoTokenizer

from textwm.generation.base import Generation
from textwm.generation.settings import DecodeSettings
from textwm.serving.engine import Prepared
from textwm.serving.protocol import ChatCompletionChunk, CompletionChunk, Usage
from textwm.serving.streaming import (
    LoopMailbox,
    RowsFailed,
    RowTokens,
    Submission,
    TextDelta,
    TextRow,
    text_decoder,
)

TEXT = "You open the fridge: café, 日本語 and 🍊 inside. The door is now open."


@pytest.fixture(scope="module")
def tokenizer(tiny_sdar_dir):
    return AutoTokenizer.from_pretrained(tiny_sdar_dir)


def submission(tokenizer, n=1, stops=(), max_tokens=100, cancelled=None):
    rows = [TextRow(tokenizer, list(stops), max_tokens) for _ in range(n)]
    return Submission(rows, prompt_tokens=3, cancel=(cancelled if cancelled is not None else []).extend)


def test_the_fast_decoder_is_the_tokenizers_own_decode(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    special = tokenizer.convert_tokens_to_ids("<|im_end|>")
    decode = text_decoder(tokenizer)
    for run in (ids, ids[:3], ids[5:9], [special, *ids[:4], special], [len(tokenizer) + 7, *ids[:2]], []):
        assert decode(run) == tokenizer.decode(run, skip_special_tokens=True)


def test_a_tokenizer_without_a_rust_backend_decodes_through_its_own_decode(tokenizer):
    class Plain:   # a slow tokenizer's interface: decode only
        def decode(self, ids, skip_special_tokens):
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens).upper()

    assert text_decoder(Plain())(tokenizer("open", add_special_tokens=False)["input_ids"]) == "OPEN"


def test_a_burst_of_events_from_the_worker_is_delivered_in_order_in_one_loop_callback(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]

    class Counting(LoopMailbox):
        deliveries = 0

        def _deliver(self):
            Counting.deliveries += 1
            super()._deliver()

    async def run():
        mailbox, sub = Counting(asyncio.get_running_loop()), submission(tokenizer)
        gate = threading.Event()

        def worker():   # posts every token while the loop is held up, as a decode step does between wake-ups
            for i, tok in enumerate(ids):
                last = i == len(ids) - 1
                mailbox.post(sub, RowTokens(0, [tok], Generation(ids, "length") if last else None))
            gate.set()

        thread = threading.Thread(target=worker)
        thread.start()
        gate.wait()      # the loop is blocked here: the whole burst is queued before it delivers anything
        thread.join()
        texts = await sub.texts()
        return texts, Counting.deliveries

    texts, deliveries = asyncio.run(run())
    assert texts == [TEXT] and deliveries == 1


def test_a_plain_reader_is_woken_only_when_its_rows_are_done(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]

    async def run():
        sub = submission(tokenizer, n=2)
        reader = asyncio.ensure_future(sub.texts())
        await asyncio.sleep(0)                        # the reader waits
        waiter = sub._waiter
        sub.receive(RowTokens(0, ids[:6], None))
        sub.receive(RowTokens(1, ids, Generation(ids, "length")))
        await asyncio.sleep(0)
        woken_early = waiter.done()                   # one row still decoding: no wake-up
        sub.receive(RowTokens(0, ids[6:], Generation(ids, "stop")))
        return woken_early, await reader, [r.finish_reason for r in sub.rows]

    woken_early, texts, reasons = asyncio.run(run())
    assert not woken_early and texts == [TEXT, TEXT] and reasons == ["stop", "length"]


def test_deltas_that_came_before_a_failure_are_read_then_the_error_is_raised(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]

    async def stream():
        sub = submission(tokenizer)
        sub.receive(RowTokens(0, ids[:5], None))
        sub.receive(RowsFailed(RuntimeError("decoder died")))
        got = []

        async def read():
            async for batch in sub.delta_batches():
                got.extend(batch)

        with pytest.raises(RuntimeError, match="decoder died"):
            await read()
        return got

    async def plain():
        sub = submission(tokenizer)
        sub.receive(RowTokens(0, ids[:5], None))
        sub.receive(RowsFailed(RuntimeError("decoder died")))
        with pytest.raises(RuntimeError, match="decoder died"):
            await sub.texts()

    got = asyncio.run(stream())
    assert "".join(d.text for d in got) == tokenizer.decode(ids[:5], skip_special_tokens=True).rstrip("\ufffd")
    asyncio.run(plain())


def test_a_stop_string_cancels_the_row_from_the_delivery(tokenizer):
    ids = tokenizer("the door opens. more text", add_special_tokens=False)["input_ids"]
    cancelled = []
    sub = submission(tokenizer, stops=["opens"], cancelled=cancelled)
    sub.receive(RowTokens(0, ids, None))
    assert cancelled == [0] and sub.done
    assert asyncio.run(sub.texts()) == ["the door "]


@pytest.mark.parametrize("include_usage", [True, False])
@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_stream_chunks_have_the_protocol_models_fields(include_usage, kind):
    from textwm.serving.app import _ChatFormat, _CompletionFormat

    prepared = Prepared([[1, 2], [1, 2]], DecodeSettings(), 8, 2, [], echo=["say: ", "say: "] if kind != "chat" else None)
    fmt = (_ChatFormat if kind == "chat" else _CompletionFormat)("m", prepared, include_usage)
    model = ChatCompletionChunk if kind == "chat" else CompletionChunk
    chunks = [*fmt.opening(), *fmt.chunks([TextDelta(0, "It opens.", None), TextDelta(1, "Ok", "stop")]),
              fmt.usage_chunk(Usage(prompt_tokens=2, completion_tokens=3, total_tokens=5))]
    assert len(chunks) == 2 + 3 + 1
    for chunk in chunks:
        parsed = json.loads(json.dumps(chunk))
        expected = model.model_validate(parsed).model_dump()
        if not include_usage and parsed["choices"]:
            expected.pop("usage")
        assert parsed == expected and list(parsed) == list(expected)   # the same fields, in the same order
    assert chunks[3]["choices"][0]["index"] == 1 and chunks[4]["choices"][0]["finish_reason"] == "stop"
