"""The float64 reference: sampled rows, patterns, padding, and its input checks."""

import pytest
import torch

from variants import attention_weights, reference_attention


def _qkv(B=2, H=2, N=24, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g) for _ in range(3)]


def test_sampled_rows_equal_the_full_answer_at_those_rows():
    q, k, v = _qkv()
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[0, 18:] = False
    full = reference_attention(q, k, v, causal=True, kv_mask=mask)
    rows = torch.tensor([0, 5, 17, 23])
    part = reference_attention(q, k, v, causal=True, kv_mask=mask, rows=rows)
    assert part.dtype == torch.float64
    torch.testing.assert_close(part, full[:, :, rows])


def test_matches_a_hand_written_softmax():
    q, k, v = _qkv(B=1, H=1, N=5, D=3)
    scores = (q[0, 0].double() @ k[0, 0].double().T) / 3**0.5
    scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.softmax(scores, -1) @ v[0, 0].double()
    torch.testing.assert_close(reference_attention(q, k, v, causal=True)[0, 0], expected)


def test_pattern_restricts_visible_keys():
    q, k, v = _qkv(N=10)
    only_self = lambda qi, ki: qi[:, None] == ki[None, :]
    out = reference_attention(q, k, v, pattern=only_self)
    torch.testing.assert_close(out, v.double())


def test_a_query_that_sees_nothing_gets_zeros():
    q, k, v = _qkv(N=6)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    assert torch.count_nonzero(reference_attention(q, k, v, kv_mask=mask)) == 0


def test_attention_weights_rows_sum_to_one_and_respect_causality():
    q, k, _ = _qkv(N=12)
    w = attention_weights(q, k, causal=True)
    assert w.shape == (2, 2, 12, 12)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 12, dtype=torch.float64))
    assert torch.count_nonzero(w.triu(1)) == 0


def test_rows_out_of_range_are_refused():
    q, k, v = _qkv(N=8)
    with pytest.raises(ValueError, match=r"rows must be 1-D query indices in \[0, 8\)"):
        reference_attention(q, k, v, rows=torch.tensor([0, 8]))


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_grouped_query_heads_read_their_kv_head(kv_heads):
    """GQA equals plain attention with K/V repeated: query head h reads K/V head h // (H // H_kv)."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 9, 8, generator=g)
    k, v = (torch.randn(2, kv_heads, 9, 8, generator=g) for _ in range(2))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    repeat = 4 // kv_heads
    kr, vr = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
    torch.testing.assert_close(
        reference_attention(q, k, v, causal=True, kv_mask=mask),
        reference_attention(q, kr, vr, causal=True, kv_mask=mask),
    )
    torch.testing.assert_close(attention_weights(q, k, kv_mask=mask), attention_weights(q, kr, kv_mask=mask))
    if kv_heads > 1:  # the other grouping (head h reads h % H_kv) is a different answer
        tiled = [t.repeat(1, repeat, 1, 1) for t in (k, v)]
        assert not torch.allclose(reference_attention(q, k, v), reference_attention(q, *tiled))
