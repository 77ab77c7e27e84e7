import math

import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE
from textwm.diffusion.sdar import IGNORE_INDEX, MASK_EPS, masked_diffusion_loss, sample_noise
from textwm.models.checkpoint import load_model
from textwm.training.objectives import SDARObjective


def test_noise_masks_only_answer_tokens_and_at_least_one():
    answer = torch.tensor([False] * 5 + [True] * 7)
    for seed in range(200):
        masked, p = sample_noise(answer, seed)
        assert MASK_EPS <= p <= 1.0
        assert masked.any()
        assert not masked[:5].any()  # prompt tokens are never masked
    a, pa = sample_noise(answer, 7)
    b, pb = sample_noise(answer, 7)
    assert torch.equal(a, b) and pa == pb  # a sample's noise depends on its seed only


def test_noise_rate_follows_p():
    answer = torch.ones(4000, dtype=torch.bool)
    for seed in (1, 2, 3):
        masked, p = sample_noise(answer, seed)
        assert masked.float().mean().item() == pytest.approx(p, abs=0.03)


def test_masked_diffusion_loss_hand_computed():
    # Position A: uniform over 3 tokens, target 0 -> CE = ln 3, p = 0.5.
    # Position B: logits [0, ln 3, 0] -> P(target=1) = 3/5 -> CE = ln(5/3), p = 0.25.
    logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.log(3), 0.0]])
    loss = masked_diffusion_loss(logits, torch.tensor([0, 1]), torch.tensor([0.5, 0.25]), num_answer_tokens=5)
    assert loss.item() == pytest.approx((math.log(3) / 0.5 + math.log(5 / 3) / 0.25) / 5, rel=1e-6)


def test_objective_loss_equals_the_definition_on_a_tiny_batch(tiny_sdar_dir):
    """SDARObjective.loss vs the REFERENCE.md formula written out by hand (doubled input, rule, CE/p, /answers)."""
    lm = load_model(tiny_sdar_dir, device="cpu", dtype="float32")
    mask_id, pad = lm.spec.mask_token_id, lm.tokenizer.pad_token_id
    objective = SDARObjective(attn_implementation="sdpa", pad_token_id=pad, mask_token_id=mask_id, block_size=4)
    # Row 0 packs two samples (prompt 3 + answer 5 incl. block padding; prompt 2 + answer 2); row 1 is one sample.
    rows = [
        {"input_ids": [11, 12, 13, 21, 22, 23, pad, pad, 14, 15, 24, 25], "labels": [-100] * 3 + [21, 22, 23, pad, pad]
         + [-100, -100, 24, 25], "position_ids": list(range(8)) + list(range(4)), "sample_ids": [0] * 8 + [1] * 4,
         "noise_seeds": [101, 202]},
        {"input_ids": [16, 17, 18, 19, 26, 27, 28, pad], "labels": [-100] * 4 + [26, 27, 28, pad],
         "position_ids": list(range(8)), "sample_ids": [0] * 8, "noise_seeds": [303]},
    ]
    batch = objective.collate(rows)
    loss = objective.loss(lm.model, batch, num_items_in_batch=None)

    total, n_answer = 0.0, 0
    for b in range(len(rows)):
        ids = batch["input_ids"][b]
        length = ids.shape[0]
        masked, p = batch["noise_mask"][b], batch["noise_p"][b]
        noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
        pos, sid = batch["position_ids"][b], batch["sample_ids"][b]
        seq = torch.cat([noisy, ids])[None]
        pos2, sid2 = torch.cat([pos, pos]), torch.cat([sid, sid])
        attn = torch.zeros(2 * length, 2 * length, dtype=torch.bool)
        for q in range(2 * length):
            for k in range(2 * length):
                if sid2[q] == PAD_SAMPLE or sid2[q] != sid2[k]:
                    attn[q, k] = q == k and sid2[q] == PAD_SAMPLE
                    continue
                bq, bk, qn, kn = pos2[q] // 4, pos2[k] // 4, q < length, k < length
                attn[q, k] = bool((bq == bk and qn == kn) or (qn and not kn and bk < bq) or (not qn and not kn and bk <= bq))
        logits = lm.model(input_ids=seq, position_ids=pos2[None], attention_mask=attn[None, None]).logits[0]
        for i in range(length):
            if batch["labels"][b, i] != IGNORE_INDEX:
                n_answer += 1
            if masked[i]:
                total += torch.nn.functional.cross_entropy(logits[i][None], ids[i][None]).item() / p[i].item()
    assert n_answer == int((batch["labels"] != IGNORE_INDEX).sum()) == 11  # 5 + 2 + 4: block padding counts
    assert loss.item() == pytest.approx(total / n_answer, rel=1e-5)
