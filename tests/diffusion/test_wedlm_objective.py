"""WeDLM training maths: per-block noise, the topological reordering, the two-stream rule, the loss."""

import math

import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE, dense_mask
from textwm.diffusion.sdar import IGNORE_INDEX
from textwm.diffusion.wedlm import (
    reorder_within_blocks,
    sample_block_noise,
    wedlm_loss,
    wedlm_loss_per_micro_batch,
    wedlm_mask_mod,
)
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
    """The rule of wedlm/README.md ("Training objective"), written out position pair by position pair."""
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


ROWS = [
    {"input_ids": [11, 12, 13, 21, 22, 23, 24, 25, 14, 15, 26, 27], "labels": [-100] * 3 + [21, 22, 23, 24, 25]
     + [-100, -100, 26, 27], "position_ids": list(range(8)) + list(range(4)), "sample_ids": [0] * 8 + [1] * 4,
     "noise_seeds": [101, 202]},
    {"input_ids": [16, 17, 18, 19, 28, 29, 30], "labels": [-100] * 4 + [28, 29, 30],
     "position_ids": list(range(7)), "sample_ids": [0] * 7, "noise_seeds": [303]},
]


@pytest.fixture(scope="module")
def wedlm(tiny_wedlm_dir):
    return load_model(tiny_wedlm_dir, device="cpu", dtype="float32")


def _objective(lm, **kw):
    return WeDLMObjective(attn_implementation="sdpa", pad_token_id=lm.tokenizer.pad_token_id,
                          mask_token_id=lm.spec.mask_token_id, noise_block=4, **kw)


def _terms_by_definition(lm, batch):
    """wedlm/README.md's objective written out per row: [x0, reordered xt], the rule; returns ([(mlm ce, gamma)], [ar ce])."""
    mask_id = lm.spec.mask_token_id
    mlm, ar = [], []
    for b in range(batch["input_ids"].shape[0]):
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
                mlm.append((ce(logits[length + slot][None], ids[i][None]).item(), gamma[i].item()))
        for i in range(length - 1):
            if labels[i + 1] != IGNORE_INDEX:
                ar.append(ce(logits[i][None], ids[i + 1][None]).item())
    return mlm, ar


def test_objective_loss_equals_the_definition_on_a_tiny_batch(wedlm):
    """WeDLMObjective.loss vs wedlm/README.md's objective written out: [x0, reordered xt], the rule, MLM/gamma + AR."""
    objective = _objective(wedlm)
    batch = objective.collate(ROWS)
    assert batch["noise_mask"].any()
    loss = objective.loss(wedlm.model, batch, num_items_in_batch=None)
    mlm, ar = _terms_by_definition(wedlm, batch)
    n_answer = int((batch["labels"] != IGNORE_INDEX).sum())
    assert n_answer == 5 + 2 + 3 == len(ar)
    assert loss.item() == pytest.approx((sum(c / g for c, g in mlm) + sum(ar)) / 2 / n_answer, rel=1e-5)


def test_micro_batch_loss_hand_computed():
    # Two mask slots: uniform over 3 tokens (ln 3) at gamma 0.5, P(target) = 3/5 at gamma 0.25 -> weights 2 and 4.
    mlm_logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.log(3), 0.0]], requires_grad=True)
    ar_logits = torch.tensor([[0.0, math.log(3), 0.0], [0.0, 0.0, 0.0]])
    loss = wedlm_loss_per_micro_batch(mlm_logits, torch.tensor([2, 1]), torch.tensor([0.5, 0.25]), ar_logits,
                                      torch.tensor([1, 0]))
    mlm = (2 * math.log(3) + 4 * math.log(5 / 3)) / 6
    ar = (math.log(5 / 3) + math.log(3)) / 2
    assert loss.item() == pytest.approx((mlm + ar) / 2, rel=1e-6)
    # An empty term is 0 (upstream's compute_*_loss), and the loss keeps its graph.
    empty = wedlm_loss_per_micro_batch(mlm_logits, torch.tensor([2, 1]), torch.tensor([0.5, 0.25]),
                                       ar_logits[:0], torch.tensor([], dtype=torch.long))
    assert empty.item() == pytest.approx(mlm / 2, rel=1e-6) and empty.requires_grad


def test_micro_batch_normalisation_equals_upstreams_definition(wedlm):
    """MLM / the micro-batch's sum of 1/gamma, AR / its answer tokens; in training, / the step's micro-batches."""
    objective = _objective(wedlm, loss_normalisation="micro_batch", accumulation_steps=3)
    batch = objective.collate(ROWS)
    mlm, ar = _terms_by_definition(wedlm, batch)
    weights = [1 / g for _, g in mlm]
    want = (sum(c * w for (c, _), w in zip(mlm, weights)) / sum(weights) + sum(ar) / len(ar)) / 2
    assert objective.loss(wedlm.model, batch).item() == pytest.approx(want, rel=1e-5)
    # In a training step (num_items_in_batch given) it is one of the step's 3 micro-batch losses (one rank).
    assert objective.loss(wedlm.model, batch, num_items_in_batch=99).item() == pytest.approx(want / 3, rel=1e-5)


def test_step_tokens_is_invariant_to_the_micro_batch_split_and_micro_batch_is_not(wedlm):
    """Why step_tokens is the default: a step split into micro-batches keeps its loss (and gradient)."""
    full = _objective(wedlm).collate(ROWS)
    parts = [_objective(wedlm).collate([row]) for row in ROWS]
    n_answer = int((full["labels"] != IGNORE_INDEX).sum())
    ours = _objective(wedlm)
    whole = ours.loss(wedlm.model, full, num_items_in_batch=n_answer).item()
    split = sum(ours.loss(wedlm.model, p, num_items_in_batch=n_answer).item() for p in parts)
    assert split == pytest.approx(whole, rel=1e-5)
    upstream_whole = _objective(wedlm, loss_normalisation="micro_batch").loss(wedlm.model, full, n_answer).item()
    upstream = _objective(wedlm, loss_normalisation="micro_batch", accumulation_steps=2)
    upstream_split = sum(upstream.loss(wedlm.model, p, num_items_in_batch=n_answer).item() for p in parts)
    assert abs(upstream_split - upstream_whole) > 1e-3 * upstream_whole


def test_the_normalisation_is_a_checked_training_option(tiny_wedlm_dir):
    from textwm.training.config import ConfigError, SFTConfig
    from textwm.training.trainer import prepare_model

    config = SFTConfig(model_name_or_path=str(tiny_wedlm_dir), train_file="unused.jsonl", objective="wedlm",
                       block_length=8, wedlm_loss_normalisation="micro_batch", gradient_accumulation_steps=3)
    objective = prepare_model(config, "sdpa")[2]
    assert (objective.loss_normalisation, objective.accumulation_steps) == ("micro_batch", 3)
    assert SFTConfig(model_name_or_path="m", train_file="t").wedlm_loss_normalisation == "step_tokens"
    with pytest.raises(ConfigError, match="wedlm_loss_normalisation must be one of step_tokens, micro_batch"):
        SFTConfig(model_name_or_path="m", train_file="t", wedlm_loss_normalisation="tokens")
    with pytest.raises(ValueError, match="loss_normalisation must be one of"):
        WeDLMObjective(attn_implementation="sdpa", pad_token_id=0, mask_token_id=1, noise_block=4,
                       loss_normalisation="sum")
