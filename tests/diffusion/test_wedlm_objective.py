"""WeDLM training maths: per-block noise, the topological reordering, the two-stream rule, the loss."""

import math

import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE, dense_mask
from textwm.diffusion.sdar import IGNORE_INDEX
from textwm.diffusion.wedlm import reorder_within_blocks, sample_block_noise, wedlm_loss, wedlm_mask_mod
from textwm.models.checkpoint import load_model
from textwm.training.objectives import WeDLMObjective


def test_block_noise_masks_round_gamma_n_answer_tokens_per_block():
    answer = torch.tensor([False] * 5 + [True] * 19)         # blocks of 8: 3 answers, 8, 8
    positions = torch.arange(24)
    for seed in range(100):
        masked, gamma = sample_block_noise(answer, positions, 8, seed)
        assert not masked[:5].any()                            # prompt tokens are never masked
        for b, n in enumerate((3, 8, 8)):
            block = slice(8 * b, 8 * b + 8)
            assert int(masked[block].sum()) == round(n * float(gamma[8 * b]))
            assert torch.all(gamma[block] == gamma[8 * b])     # one ratio per block
    a, ga = sample_block_noise(answer, positions, 8, 7)
    b, gb = sample_block_noise(answer, positions, 8, 7)
    assert torch.equal(a, b) and torch.equal(ga, gb)           # a sample's noise depends on its seed only


def test_reordering_puts_observed_tokens_first_inside_each_sample_block():
    # Two packed samples (5 and 4 tokens) and padding; block 2.
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0]])
    sid = torch.tensor([[0] * 5 + [1] * 4 + [PAD_SAMPLE]])
    masked = torch.tensor([[0, 0, 1, 0, 1, 1, 0, 1, 1, 0]], dtype=torch.bool)
    order = reorder_within_blocks(masked, pos, sid, 2)[0].tolist()
    # sample 0 blocks {0,1} {2,3} {4}; sample 1 blocks {5,6} {7,8}; padding {9}
    assert order == [0, 1, 3, 2, 4, 6, 5, 7, 8, 9]


def _brute_force_wedlm(pos, sid, block, clean_len):
    """The rule of REFERENCE.md "WeDLM", written out position pair by position pair."""
    n = len(pos)
    m = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(n):
            if sid[q] == PAD_SAMPLE or sid[q] != sid[k]:
                continue
            bq, bk = pos[q] // block, pos[k] // block
            q_clean, k_clean = q < clean_len, k < clean_len
            causal_in_block = q_clean == k_clean and bq == bk and k <= q
            prediction_sees_earlier_clean = not q_clean and k_clean and bk < bq
            clean_sees_earlier_clean = q_clean and k_clean and bk < bq
            m[q, k] = causal_in_block or prediction_sees_earlier_clean or clean_sees_earlier_clean
    return m


@pytest.mark.parametrize("block", [1, 2, 4])
def test_wedlm_mask_equals_brute_force_with_packing_and_padding(block):
    pos = [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 0]
    sid = [0] * 6 + [1] * 4 + [PAD_SAMPLE] * 2
    xt_pos = [1, 0, 3, 2, 4, 5, 0, 1, 3, 2, 0, 0]             # a reordering inside blocks of 2
    pos2, sid2 = torch.tensor([pos + xt_pos]), torch.tensor([sid + sid])
    got = dense_mask(wedlm_mask_mod(pos2, sid2, block, len(pos)), 1, 24, 24, "cpu")[0, 0]
    want = _brute_force_wedlm(pos + xt_pos, sid + sid, block, len(pos))
    pad_rows = torch.tensor(sid + sid) == PAD_SAMPLE
    assert torch.equal(got[~pad_rows], want[~pad_rows])
    assert not got[~pad_rows][:, pad_rows].any()
    # The clean stream is ordinary causal attention within each sample.
    clean = got[:10, :10]
    for q in range(10):
        for k in range(10):
            assert bool(clean[q, k]) == (sid[q] == sid[k] and k <= q)


def test_wedlm_loss_hand_computed():
    # MLM: uniform over 3 tokens, gamma 0.5 -> ln3 / 0.5. AR: P(target) = 3/5 -> ln(5/3). 4 answer tokens, w = 1.
    mlm_logits = torch.tensor([[0.0, 0.0, 0.0]])
    ar_logits = torch.tensor([[0.0, math.log(3), 0.0]])
    loss = wedlm_loss(mlm_logits, torch.tensor([2]), torch.tensor([0.5]), ar_logits, torch.tensor([1]), 4)
    assert loss.item() == pytest.approx((math.log(3) / 0.5 + math.log(5 / 3)) / 2 / 4, rel=1e-6)


def test_objective_loss_equals_the_definition_on_a_tiny_batch(tiny_wedlm_dir):
    """WeDLMObjective.loss vs REFERENCE.md written out: [x0, reordered xt], the rule, MLM/gamma + AR."""
    lm = load_model(tiny_wedlm_dir, device="cpu", dtype="float32")
    mask_id, pad = lm.spec.mask_token_id, lm.tokenizer.pad_token_id
    objective = WeDLMObjective(attn_implementation="sdpa", pad_token_id=pad, mask_token_id=mask_id, noise_block=4)
    rows = [
        {"input_ids": [11, 12, 13, 21, 22, 23, 24, 25, 14, 15, 26, 27], "labels": [-100] * 3 + [21, 22, 23, 24, 25]
         + [-100, -100, 26, 27], "position_ids": list(range(8)) + list(range(4)), "sample_ids": [0] * 8 + [1] * 4,
         "noise_seeds": [101, 202]},
        {"input_ids": [16, 17, 18, 19, 28, 29, 30], "labels": [-100] * 4 + [28, 29, 30],
         "position_ids": list(range(7)), "sample_ids": [0] * 7, "noise_seeds": [303]},
    ]
    batch = objective.collate(rows)
    assert batch["noise_mask"].any()
    loss = objective.loss(lm.model, batch, num_items_in_batch=None)

    mlm = ar = 0.0
    for b in range(len(rows)):
        ids, labels, masked = batch["input_ids"][b], batch["labels"][b], batch["noise_mask"][b]
        pos, sid, gamma = batch["position_ids"][b], batch["sample_ids"][b], batch["noise_gamma"][b]
        length = ids.shape[0]
        # xt: per (sample, block of 4), observed slots first, then masks, logical positions kept.
        order = []
        groups: dict = {}
        for i in range(length):
            groups.setdefault((int(sid[i]), int(pos[i]) // 4, i if sid[i] == PAD_SAMPLE else -1), []).append(i)
        for members in groups.values():
            order += [i for i in members if not masked[i]] + [i for i in members if masked[i]]
        xt = [mask_id if masked[i] else int(ids[i]) for i in order]
        seq = torch.tensor([ids.tolist() + xt])
        pos2 = pos.tolist() + [int(pos[i]) for i in order]
        sid2 = sid.tolist() + [int(sid[i]) for i in order]
        attn = _brute_force_wedlm(pos2, sid2, 4, length)
        attn |= torch.eye(2 * length, dtype=torch.bool) & (torch.tensor(sid2) == PAD_SAMPLE)[:, None]
        logits = lm.model(input_ids=seq, position_ids=torch.tensor([pos2]), attention_mask=attn[None, None]).logits[0]
        ce = torch.nn.functional.cross_entropy
        for slot, i in enumerate(order):
            if masked[i]:
                mlm += ce(logits[length + slot][None], ids[i][None]).item() / gamma[i].item()
        for i in range(length - 1):
            if labels[i + 1] != IGNORE_INDEX:
                ar += ce(logits[i][None], ids[i + 1][None]).item()
    n_answer = int((batch["labels"] != IGNORE_INDEX).sum())
    assert n_answer == 5 + 2 + 3
    assert loss.item() == pytest.approx((mlm + ar) / 2 / n_answer, rel=1e-5)
