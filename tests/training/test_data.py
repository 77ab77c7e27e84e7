import pytest
import torch

from tests.conftest import chat
from textwm.data.chat_encoder import ChatEncoder
from textwm.diffusion.masks import PAD_SAMPLE
from textwm.diffusion.sdar import IGNORE_INDEX
from textwm.models.checkpoint import load_model
from textwm.training.data import TrainingRows, build_rows, encode_rows, pad_batch


@pytest.fixture(scope="module")
def tokenizer(tiny_sdar_dir):
    return load_model(tiny_sdar_dir, device="cpu", dtype="float32").tokenizer


def test_prompt_plus_answer_is_the_rendered_conversation(tokenizer):
    enc = ChatEncoder(tokenizer)
    row = chat(user="State: kitchen\n\nAction: open door", answer="The door is now open.")
    prompt, answer = enc.encode(row["messages"])
    assert enc.end_of_turn == "<|im_end|>\n"
    full = tokenizer.apply_chat_template(row["messages"], tokenize=False)
    assert tokenizer.decode(prompt + answer) == full
    assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(answer) == "The door is now open.<|im_end|>\n"


def test_block_padding_is_labelled(tokenizer):
    rows = [chat(answer="The door is now open.")]
    report = encode_rows(rows, ChatEncoder(tokenizer), cutoff_len=512, truncate_mode="drop", block_size=8)
    s = report.samples[0]
    assert len(s) % 8 == 0
    built = build_rows(report.samples, max_len=512, packing=False)[0]
    n_pad = (-(len(s.prompt_ids) + len(ChatEncoder(tokenizer).encode(rows[0]["messages"])[1]))) % 8
    assert built.labels[len(built.labels) - n_pad:] == [tokenizer.pad_token_id] * n_pad  # padding IS labelled


def test_cutoff_drop_and_cut_are_counted(tokenizer):
    enc = ChatEncoder(tokenizer)
    long_row = chat(user="State: " + "the kitchen " * 200 + "\n\nAction: wait", answer="Nothing happens.")
    short = chat(answer="ok")
    dropped = encode_rows([long_row, short], enc, cutoff_len=64, truncate_mode="drop", block_size=4)
    assert (len(dropped.samples), dropped.dropped_too_long, dropped.truncated) == (1, 1, 0)
    cut = encode_rows([long_row, short], enc, cutoff_len=64, truncate_mode="cut", block_size=4)
    assert (len(cut.samples), cut.dropped_too_long, cut.truncated) == (2, 0, 1)
    s = cut.samples[0]
    assert len(s) <= 64 and len(s) % 4 == 0
    assert tokenizer.decode(s.prompt_ids).endswith("Action: wait<|im_end|>\n<|im_start|>assistant\n")
    too_long_answer = chat(answer="word " * 200)
    assert encode_rows([too_long_answer], enc, cutoff_len=64, truncate_mode="cut", block_size=4).dropped_too_long == 1


def test_packing_restarts_positions_and_keeps_every_sample(tokenizer):
    rows = [chat(answer="a" * (i + 1)) for i in range(7)]
    samples = encode_rows(rows, ChatEncoder(tokenizer), cutoff_len=256, truncate_mode="drop", block_size=4).samples
    packed = build_rows(samples, max_len=256, packing=True)
    assert len(packed) < len(samples)
    assert sorted(i for r in packed for i in r.sample_indices) == list(range(7))
    for r in packed:
        assert len(r) <= 256
        for sid in set(r.sample_ids):
            positions = [p for p, s in zip(r.position_ids, r.sample_ids) if s == sid]
            assert positions == list(range(len(positions)))


def test_pad_batch_and_noise_seeds(tokenizer):
    rows = build_rows(encode_rows([chat(), chat(answer="x y z")], ChatEncoder(tokenizer), cutoff_len=256,
                                  truncate_mode="drop", block_size=4).samples, max_len=256, packing=False)
    ds = TrainingRows(rows, seed=3)
    batch = pad_batch([ds[0], ds[1]], pad_token_id=0, multiple_of=4)
    assert batch["input_ids"].shape[1] % 4 == 0
    short = 0 if len(rows[0]) < len(rows[1]) else 1
    tail = batch["sample_ids"][short, len(rows[short]):]
    assert (tail == PAD_SAMPLE).all() and (batch["labels"][short, len(rows[short]):] == IGNORE_INDEX).all()
    seed0 = ds[0]["noise_seeds"]
    ds.epoch = 1
    assert ds[0]["noise_seeds"] != seed0  # fresh noise each epoch
    ds.epoch = 0
    assert ds[0]["noise_seeds"] == seed0 and isinstance(seed0[0], int) and torch.tensor(seed0).dtype == torch.long


@pytest.mark.timeout(30)
def test_an_answer_that_fits_only_without_its_block_padding_is_dropped_not_looped_on(tokenizer):
    """cut mode: the prompt is cut to the room the answer leaves, then a token at a time while block padding
    pushes the sample over; when the prompt is gone and answer + padding still do not fit, the sample is
    dropped (this once looped forever)."""
    enc = ChatEncoder(tokenizer)
    row = chat(user="State: a room\n\nAction: look", answer="word " * 30)
    answer = len(enc.encode(row["messages"])[1])
    cutoff = answer + 1 if (answer + 1) % 8 else answer + 2          # room for the answer, not for its padding
    report = encode_rows([row], enc, cutoff_len=cutoff, truncate_mode="cut", block_size=8)
    assert (len(report.samples), report.dropped_too_long, report.truncated) == (0, 1, 0)
