"""The trimmed noisy copy: which blocks are kept, and that leaving the rest out changes no loss or gradient."""

import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE
from textwm.diffusion.noisy_stream import blocks_with_a_mask, kept_index
from textwm.models.checkpoint import load_model
from textwm.training.objectives import SDARObjective, WeDLMObjective

# Rows as the encoder makes them: long prompts, short answers (a world model's rows), packed and padded.
PROMPT = list(range(40, 80))
ROWS = [
    {"input_ids": [*PROMPT[:30], 21, 22, 23, *PROMPT[:20], 24, 25, 26, 27, 28],
     "labels": [-100] * 30 + [21, 22, 23] + [-100] * 20 + [24, 25, 26, 27, 28],
     "position_ids": list(range(33)) + list(range(25)), "sample_ids": [0] * 33 + [1] * 25, "noise_seeds": [5, 6]},
    {"input_ids": [*PROMPT, 29, 30], "labels": [-100] * 40 + [29, 30],
     "position_ids": list(range(42)), "sample_ids": [0] * 42, "noise_seeds": [7]},
]


def test_blocks_with_a_mask_follow_samples_and_blocks():
    #            sample 0: blocks [0-3] [4-5]   | sample 1: block [0-3]     | padding
    masked = torch.tensor([[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 0]])
    samples = torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1, 1, 1, PAD_SAMPLE, PAD_SAMPLE]])
    keep = blocks_with_a_mask(masked, positions, samples, block_size=4)
    assert keep.tolist() == [[False] * 4 + [True] * 2 + [True] * 4 + [False] * 2]


def test_kept_index_keeps_order_and_marks_the_padding():
    keep = torch.tensor([[False, True, True, False, True], [False, False, False, True, False]])
    index, valid = kept_index(keep, multiple=4)
    assert index.shape == (2, 4) and index[0, :3].tolist() == [1, 2, 4] and index[1, 0].item() == 3
    assert valid.tolist() == [[True, True, True, False], [True, False, False, False]]
    assert kept_index(keep, multiple=8)[0].shape == (2, 5)        # never longer than the row
    assert kept_index(torch.zeros(1, 6, dtype=torch.bool), multiple=1)[0].shape == (1, 1)


def test_the_memory_checks_noisy_length_is_the_most_a_step_keeps():
    """noisy_copy_tokens (the memory estimate's, per row) equals what the objective keeps when every answer
    token is masked, the largest noisy copy any draw can give."""
    from textwm.training.data import TrainingRow, noisy_copy_tokens, pad_batch

    batch = pad_batch(ROWS, pad_token_id=0, multiple_of=4)
    keep = blocks_with_a_mask(batch["labels"] != -100, batch["position_ids"], batch["sample_ids"], block_size=4)
    rows = [TrainingRow(input_ids=r["input_ids"], labels=r["labels"], position_ids=r["position_ids"],
                        sample_ids=r["sample_ids"]) for r in ROWS]
    assert [noisy_copy_tokens(r, 4) for r in rows] == keep.sum(dim=1).tolist() == [5 + 5, 2]


def _loss_and_grads(objective, lm, batch):
    lm.model.zero_grad(set_to_none=True)
    lengths = []
    hook = lm.model.get_input_embeddings().register_forward_hook(lambda m, i, o: lengths.append(i[0].shape[1]))
    try:
        loss = objective.loss(lm.model, batch, num_items_in_batch=None)
    finally:
        hook.remove()
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in lm.model.named_parameters() if p.grad is not None}, lengths[0]


@pytest.mark.parametrize("loss_impl", ["logits", "chunked"])
@pytest.mark.parametrize("family", ["sdar", "wedlm"])
def test_trimmed_noisy_copy_gives_the_full_copys_loss_and_gradients(family, loss_impl, request):
    lm = load_model(request.getfixturevalue(f"tiny_{family}_dir"), device="cpu", dtype="float32")

    def objective(trim):
        common = dict(attn_implementation="sdpa", pad_token_id=lm.tokenizer.pad_token_id, loss_impl=loss_impl,
                      mask_token_id=lm.spec.mask_token_id, trim_noisy_copy=trim)
        return SDARObjective(block_size=4, **common) if family == "sdar" else WeDLMObjective(noise_block=4, **common)

    batch = objective(True).collate(ROWS)              # the same noise for both
    full_loss, full_grads, full_length = _loss_and_grads(objective(False), lm, batch)
    loss, grads, length = _loss_and_grads(objective(True), lm, batch)
    rows = batch["input_ids"].shape[1]
    assert full_length == 2 * rows and length < 1.5 * rows          # the prompts' noisy blocks are gone
    torch.testing.assert_close(loss, full_loss, rtol=1e-5, atol=0)
    assert grads.keys() == full_grads.keys()
    for k, g in grads.items():
        torch.testing.assert_close(g, full_grads[k], rtol=1e-4, atol=1e-5 * full_grads[k].abs().max() + 1e-9, msg=k)
