import pytest
import torch

from textwm.diffusion.masks import PAD_SAMPLE, build_mask, dense_mask, packed_causal_mask_mod, sdar_mask_mod


def _brute_force_sdar(pos, sid, block, half):
    """The attention rule of sdar/README.md ("Training objective"), written out position pair by position pair."""
    n = len(pos)
    m = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(n):
            if sid[q] == PAD_SAMPLE or sid[q] != sid[k]:
                continue
            bq, bk = pos[q] // block, pos[k] // block
            q_noisy, k_noisy = q < half, k < half
            if (bq == bk and q_noisy == k_noisy) or (q_noisy and not k_noisy and bk < bq) or (
                    not q_noisy and not k_noisy and bk <= bq):
                m[q, k] = True
    return m


@pytest.mark.parametrize("block", [1, 2, 4])
def test_sdar_mask_equals_brute_force_with_packing_and_padding(block):
    # One row: sample 0 (6 tokens), sample 1 (4 tokens), 2 padding positions; doubled -> 24.
    pos = [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 0]
    sid = [0] * 6 + [1] * 4 + [PAD_SAMPLE] * 2
    pos2, sid2 = torch.tensor([pos + pos]), torch.tensor([sid + sid])
    got = dense_mask(sdar_mask_mod(pos2, sid2, block, len(pos)), 1, 24, 24, "cpu")[0, 0]
    want = _brute_force_sdar(pos + pos, sid + sid, block, len(pos))
    pad_rows = torch.tensor(sid + sid) == PAD_SAMPLE
    assert torch.equal(got[~pad_rows], want[~pad_rows])
    # Padding queries see only themselves (no NaN in SDPA); nobody sees padding keys.
    assert torch.equal(got[pad_rows], torch.eye(24, dtype=torch.bool)[pad_rows])
    assert not got[~pad_rows][:, pad_rows].any()


def test_sdar_mask_spot_checks():
    # 8 tokens, block 4, one sample: noisy block 1 sees clean block 0 but not clean block 1.
    pos = torch.arange(8)[None].repeat(1, 2)
    sid = torch.zeros(1, 16, dtype=torch.long)
    m = dense_mask(sdar_mask_mod(pos, sid, 4, 8), 1, 16, 16, "cpu")[0, 0]
    assert m[5, 8 + 0] and not m[5, 8 + 4]      # noisy pos 5 -> clean pos 0 yes, clean pos 4 no
    assert m[5, 7] and not m[5, 3]              # noisy sees its own block only among noisy keys
    assert m[8 + 5, 8 + 7] and m[8 + 5, 8 + 0]  # clean: whole own block and earlier blocks
    assert not m[8 + 1, 8 + 4] and not m[8 + 1, 1]  # clean never sees later blocks or the noisy copy


def test_packed_causal_mask():
    sid = torch.tensor([[0, 0, 0, 1, 1, PAD_SAMPLE]])
    m = dense_mask(packed_causal_mask_mod(sid), 1, 6, 6, "cpu")[0, 0]
    want = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                         [0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(m, want)


def test_flex_attention_with_the_rule_equals_sdpa_with_the_dense_mask():
    """The same mask_mod drives both backends: attention outputs must agree (real rows only)."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    pos = torch.tensor([list(range(70)) + list(range(52)) + [0] * 6])
    sid = torch.tensor([[0] * 70 + [1] * 52 + [PAD_SAMPLE] * 6])
    pos2, sid2 = pos.repeat(1, 2), sid.repeat(1, 2)
    n = pos2.shape[1]
    rule = sdar_mask_mod(pos2, sid2, 4, pos.shape[1])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    block_mask = build_mask(rule, 1, n, n, "cpu", attn_implementation="flex_attention")
    out_flex = flex.flex_attention(q, k, v, block_mask=block_mask)
    dense = build_mask(rule, 1, n, n, "cpu", attn_implementation="sdpa")
    out_sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    real = (sid2[0] != PAD_SAMPLE)
    assert torch.allclose(out_flex[:, :, real], out_sdpa[:, :, real], atol=1e-5)


def test_eager_mask_is_additive():
    sid = torch.tensor([[0, 0]])
    m = build_mask(packed_causal_mask_mod(sid), 1, 2, 2, "cpu", attn_implementation="eager")
    assert m.dtype == torch.float32
    assert m[0, 0, 0, 1] == torch.finfo(torch.float32).min and m[0, 0, 1, 0] == 0
