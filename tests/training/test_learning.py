"""Short CPU runs: tiny AR, SDAR and WeDLM world models all beat their untrained selves on EM."""

import pytest

from tests.conftest import write_lines
from tests.toy_world import transitions
from textwm.data.chat_encoder import ChatEncoder
from textwm.generation.decoders import make_decoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.models.tiny import build_tiny_checkpoint, chat_texts
from textwm.training.config import SFTConfig
from textwm.training.trainer import train


def _exact_match(model_dir, rows) -> float:
    lm = load_model(model_dir, device="cpu", dtype="float32")
    encoder = ChatEncoder(lm.tokenizer)
    decoder = make_decoder(lm.model, lm.spec, pad_token_id=lm.tokenizer.pad_token_id)
    outs = decoder.generate([encoder.prompt_ids(r["messages"][:-1]) for r in rows],
                            DecodeSettings(gen_length=16, temperature=0, block_length=4, denoising_steps=4))
    preds = [lm.tokenizer.decode(o.token_ids, skip_special_tokens=False).strip() for o in outs]
    return sum(p == r["messages"][-1]["content"] for p, r in zip(preds, rows)) / len(rows)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "steps"), [("ar", 200), ("sdar", 600), ("wedlm", 400)])
def test_short_training_beats_untrained_on_exact_match(family, steps, tmp_path):
    train_rows, test_rows = transitions(400, seed=0), transitions(40, seed=1)
    data = write_lines(tmp_path / "train.jsonl", train_rows)
    start = build_tiny_checkpoint(tmp_path / "init", chat_texts(train_rows), family=family, size="tiny",
                                  block_size=4, vocab_size=600)
    before = _exact_match(start, test_rows)
    train(SFTConfig(model_name_or_path=str(start), objective=family, train_file=str(data), output_dir=str(tmp_path / "out"),
                    cutoff_len=128, learning_rate=3e-3, per_device_train_batch_size=16, max_steps=steps,
                    logging_steps=100, save_steps=10_000, warmup_ratio=0.05, block_length=4))
    after = _exact_match(tmp_path / "out", test_rows)
    assert before == 0.0
    assert after >= 0.2, f"{family}: EM {before:.3f} -> {after:.3f}"
