import math

import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE
from textwm.diffusion.sdar import IGNORE_INDEX, MASK_EPS, masked_diffusion_loss, sample_row_noise
from textwm.models.checkpoint import load_model
from textwm.training.objectives import SDARObjective


def test_noise_masks_only_answer_tokens_and_at_least_one_per_row():
    answers = [torch.tensor([False] * 5 + [True] * 3), torch.tensor([False] * 2 + [True] * 2)]
    for seed in range(300):
        draws = sample_row_noise(answers, [seed, seed + 1000])
        assert any(m.any() for m, _ in draws)  # at least one mask in the row, not in every sample
        for (masked, p), answer in zip(draws, answers):
            assert MASK_EPS <= p <= 1.0 and not (masked & ~answer).any()  # prompt tokens never masked
    a = sample_row_noise(answers, [7, 8])
    b = sample_row_noise(answers, [7, 8])
    assert all(torch.equal(x[0], y[0]) and x[1] == y[1] for x, y in zip(a, b))  # depends on the seeds only
    assert not any(m.any() for m, _ in sample_row_noise([torch.zeros(4, dtype=torch.bool)], [3]))  # no answer


def test_noise_rate_follows_p():
    answer = torch.ones(4000, dtype=torch.bool)
    for seed in (1, 2, 3):
        [(masked, p)] = sample_row_noise([answer], [seed])
        assert masked.float().mean().item() == pytest.approx(p, abs=0.03)


def _stream(seed: int, n: int, draws: int) -> list[tuple[torch.Tensor, float]]:
    """The first ``draws`` draws of a sample's generator: ``t``, then ``n`` uniforms, each time."""
    gen, out = torch.Generator().manual_seed(seed), []
    for _ in range(draws):
        p = (1 - MASK_EPS) * torch.rand((), generator=gen).item() + MASK_EPS
        out.append((torch.rand(n, generator=gen) < p, p))
    return out


def test_empty_draws_are_redrawn_then_one_token_forced():
    """Upstream's rule (modeling_sdar.py forward_add_noise_packed): redraw the whole row, up to 10 draws."""
    answer = torch.ones(2, dtype=torch.bool)
    # A seed whose first draw masks nothing and whose second does: the result is the second draw.
    seed = next(s for s in range(1000) if not _stream(s, 2, 1)[0][0].any() and _stream(s, 2, 2)[1][0].any())
    masked, p = sample_row_noise([answer], [seed])[0]
    expected, expected_p = _stream(seed, 2, 2)[1]
    assert torch.equal(masked, expected) and p == pytest.approx(expected_p)
    # Redraws are per row: a second sample that masks something on the first draw keeps the first draws.
    other = next(s for s in range(1000) if _stream(s, 3, 1)[0][0].any())
    draws = sample_row_noise([answer, torch.ones(3, dtype=torch.bool)], [seed, other])
    assert not draws[0][0].any() and torch.equal(draws[1][0], _stream(other, 3, 1)[0][0])
    # After the last draw, one answer token is forced at that draw's p.
    masked, p = sample_row_noise([answer], [seed], max_tries=1)[0]
    assert int(masked.sum()) == 1 and p == pytest.approx(_stream(seed, 2, 1)[0][1])


def _mean_weight(sizes: list[int], rows: int) -> tuple[float, float]:
    """Mean over ``rows`` rows of ``sum of 1/p over masked tokens / answer tokens`` and its standard error."""
    answers = [torch.ones(n, dtype=torch.bool) for n in sizes]
    values = torch.empty(rows, dtype=torch.float64)
    for r in range(rows):
        draws = sample_row_noise(answers, [r * len(sizes) + s for s in range(len(sizes))])
        values[r] = sum(int(m.sum()) / p for m, p in draws) / sum(sizes)
    return values.mean().item(), (values.std() / rows ** 0.5).item()


def _upstream_bias(sizes: list[int], eps: float = MASK_EPS) -> float:
    """``1 / (1 - q)``: the weight of the redraw rule, ``q = prod_s (1 - eps)^n_s / (n_s + 1)`` (no mask in a row)."""
    q = math.prod((1 - eps) ** n / (n + 1) for n in sizes)
    return 1 / (1 - q)


def test_inverse_p_weights_unbiased_on_packed_rows_and_measured_on_single_short_samples():
    """E[sum of 1/p over masked tokens] / n, measured over many rows.

    A packed row of 4 samples of 16 answer tokens: unbiased (the expected bias, q = 1.1e-5, is far
    below the error). A row of one 16-token sample: upstream's rule is itself biased, by
    1 / (1 - q) = 1.061 (q = (1 - eps)^16 / 17, the chance a draw masks nothing), and we measure that
    rather than hide it. The old per-sample "force one at the same p" rule gave 1.22 there.
    """
    mean, se = _mean_weight([16, 16, 16, 16], rows=6000)
    assert _upstream_bias([16] * 4) - 1 < 2e-5
    assert abs(mean - 1.0) < 4 * se, (mean, se)
    mean, se = _mean_weight([16], rows=12000)
    assert _upstream_bias([16]) == pytest.approx(1.0614, abs=1e-4)
    assert abs(mean - _upstream_bias([16])) < 4 * se and mean - 1.0 > 4 * se, (mean, se)
    assert mean < 1.15  # far from the old rule's 1.22


def test_masked_diffusion_loss_hand_computed():
    # Position A: uniform over 3 tokens, target 0 -> CE = ln 3, p = 0.5.
    # Position B: logits [0, ln 3, 0] -> P(target=1) = 3/5 -> CE = ln(5/3), p = 0.25.
    logits = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.log(3), 0.0]])
    loss = masked_diffusion_loss(logits, torch.tensor([0, 1]), torch.tensor([0.5, 0.25]), num_answer_tokens=5)
    assert loss.item() == pytest.approx((math.log(3) / 0.5 + math.log(5 / 3) / 0.25) / 5, rel=1e-6)


def test_objective_loss_equals_the_definition_on_a_tiny_batch(tiny_sdar_dir):
    """SDARObjective.loss vs sdar/README.md's formula ("Training objective") written out by hand (doubled input, rule, CE/p, /answers)."""
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


def test_collated_noise_depends_on_each_rows_seeds_only():
    """The same packed row gets the same masks and p alone, in a batch, or after another row."""
    objective = SDARObjective(attn_implementation="sdpa", pad_token_id=0, mask_token_id=1, block_size=4)
    rows = [{"input_ids": list(range(10, 22)), "labels": [-100] * 3 + list(range(13, 18)) + [-100, -100, 20, 21],
             "position_ids": list(range(8)) + list(range(4)), "sample_ids": [0] * 8 + [1] * 4,
             "noise_seeds": [seed, seed + 1]} for seed in (5, 77, 901)]
    together = objective.collate(rows)
    for b, row in enumerate(rows):
        alone = objective.collate([row])
        n = len(row["input_ids"])
        assert torch.equal(alone["noise_mask"][0, :n], together["noise_mask"][b, :n])
        assert torch.equal(alone["noise_p"][0, :n], together["noise_p"][b, :n])
        expected = sample_row_noise([torch.tensor(row["labels"][:8]) != -100, torch.tensor(row["labels"][8:]) != -100],
                                    row["noise_seeds"])
        assert torch.equal(together["noise_mask"][b, :n], torch.cat([expected[0][0], expected[1][0]]))
