"""Token deltas to text deltas (textwm.serving.streaming): stable text only, stop strings across deltas, the cap.

The tiny tokenizer is byte-level BPE trained on ASCII text, so every non-ASCII character is split over
several byte tokens: the partial-character case of incremental detokenisation comes up at once.
"""

import random

import pytest
from transformers import AutoTokenizer

from textwm.generation.base import Generation
from textwm.serving.streaming import REPLACEMENT, Detokenizer, TextRow

TEXT = "You open the fridge: café, 日本語 and 🍊 inside. The door is now open. Nothing happens."


@pytest.fixture(scope="module")
def tokenizer(tiny_sdar_dir):
    return AutoTokenizer.from_pretrained(tiny_sdar_dir)


def chunks(ids, rng):
    """``ids`` cut into random runs of 1-5 tokens (a block or window step commits several at once)."""
    out, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 5)
        out.append(ids[i:i + n])
        i += n
    return out


def test_incremental_text_is_stable_and_concatenates_to_the_whole_decode(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(TEXT.split())                              # multi-token characters are present
    for seed in range(5):
        detok, pieces = Detokenizer(tokenizer), []
        for run in chunks(ids, random.Random(seed)):
            pieces.append(detok.push(run))
        pieces.append(detok.flush())
        assert "".join(pieces) == TEXT == tokenizer.decode(ids, skip_special_tokens=True)
        assert not any(REPLACEMENT in p for p in pieces)             # no half character is ever sent


def test_a_split_character_left_at_the_end_is_flushed_as_the_whole_decode_has_it(tokenizer):
    ids = tokenizer("ok 🍊", add_special_tokens=False)["input_ids"][:-1]  # the orange's last byte is missing
    detok = Detokenizer(tokenizer)
    text = detok.push(ids)
    assert REPLACEMENT not in text
    assert text + detok.flush() == tokenizer.decode(ids, skip_special_tokens=True)


def feed_all(row, runs, finished):
    pieces = [row.feed(run, finished if i == len(runs) - 1 else None) for i, run in enumerate(runs)]
    return pieces


@pytest.mark.parametrize("seed", range(8))
def test_stop_strings_across_deltas_cut_where_the_whole_text_would(tokenizer, seed):
    rng = random.Random(seed)
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    start = rng.randrange(1, len(TEXT) - 6)
    stops = [TEXT[start:start + rng.randint(2, 6)], "never there", "e d" if seed % 2 else "xq"]
    row = TextRow(tokenizer, stops, max_tokens=1000)
    pieces = feed_all(row, chunks(ids, rng), Generation(ids, "stop"))
    cut = min(i for i in (TEXT.find(s) for s in stops) if i >= 0)
    assert "".join(pieces) == TEXT[:cut] and row.finish_reason == "stop"
    sent = ""
    for piece in pieces:                                            # never text past (or of) a stop string
        sent += piece
        assert not any(s in sent for s in stops)


def test_held_back_text_that_is_no_stop_is_released_and_the_decoders_reason_kept(tokenizer):
    ids = tokenizer("The door is now open.", add_special_tokens=False)["input_ids"]
    row = TextRow(tokenizer, ["open!", ".."], max_tokens=100)
    pieces = feed_all(row, [[t] for t in ids], Generation(ids, "stop"))
    assert "".join(pieces) == "The door is now open." and row.finish_reason == "stop"
    assert pieces[-1].endswith(".")                                  # "." could begin "..": held to the end
    row = TextRow(tokenizer, [], max_tokens=100)
    assert "".join(feed_all(row, [ids], Generation(ids, "length"))) == "The door is now open."
    assert row.finish_reason == "length"


def test_max_tokens_is_an_exact_cap_when_a_step_overshoots(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    row = TextRow(tokenizer, [], max_tokens=5)
    first = row.feed(ids[:3], None)
    second = row.feed(ids[3:11], None)                               # a block of 8 crosses the cap
    assert first + second == tokenizer.decode(ids[:5], skip_special_tokens=True)
    assert (row.tokens, row.finish_reason) == (5, "length")
    assert row.feed(ids[11:], Generation(ids, "length")) == ""      # later steps add nothing


def test_a_row_cut_by_a_stop_string_gets_one_finish_even_if_tokens_still_come(tokenizer):
    """n=2: row 0 is cut by a stop string while a step already under way posts more of its tokens."""
    import asyncio

    from textwm.serving.streaming import RowTokens, Submission

    ids = tokenizer("the door opens. more text", add_special_tokens=False)["input_ids"]
    rows = [TextRow(tokenizer, ["opens"], 50), TextRow(tokenizer, [], 50)]
    cancelled = []
    sub = Submission(rows, prompt_tokens=3, cancel=cancelled.extend)

    async def run():
        for event in (RowTokens(0, ids, None), RowTokens(1, ids[:2], None), RowTokens(0, ids[:2], None),
                      RowTokens(1, ids[2:], Generation(token_ids=ids, finish_reason="length"))):
            sub.receive(event)
        return [d async for d in sub.deltas()]

    deltas = asyncio.run(run())
    finishes = [d.index for d in deltas if d.finish_reason is not None]
    assert finishes.count(0) == 1 and cancelled == [0]
