"""chunked with a window (a model's own sliding window, through `windowed`): sliding_window's band computed by tiles,
those wholly outside it skipped, forward and backward; checked against the float64 reference under the band."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from variants import build_variant
from variants.reference import reference_attention

B, H, D, W = 2, 4, 8, 12


def _inputs(n: int, m: int, kv_heads: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, kv_heads, m, D, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(B, m, dtype=torch.bool)
    mask[0, :3], mask[1, m // 2 : m // 2 + 5] = False, False  # left padding and a hole
    return q, k, v, mask


@pytest.mark.parametrize(
    "causal,n,m",
    [(True, 40, 40), (True, 1, 40), (True, 9, 40), (False, 40, 40)],  # N < M: a causal offset only
    ids=["causal", "one-query", "offset", "bidirectional"],
)
@pytest.mark.parametrize("kv_heads", [H, 2])
def test_a_windowed_chunked_equals_the_reference_in_its_band(causal, n, m, kv_heads):
    attn = build_variant("chunked", query_chunk=8, key_chunk=16).windowed(W)
    assert attn.config.window == W and attn.windowed(40) is attn and attn.windowed(5).config.window == 5
    q, k, v, mask = _inputs(n, m, kv_heads)
    reference = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
    sliding = build_variant("sliding_window", window=W)(q.float(), k.float(), v.float(), causal=causal, kv_mask=mask)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, causal=causal, kv_mask=mask)
    torch.testing.assert_close(out.double(), reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, sliding, rtol=1e-5, atol=1e-5)  # the same band as sliding_window's
    exact = [t.clone().requires_grad_() for t in (q, k, v)]
    grad = torch.randn_like(reference)
    reference_attention(*exact, causal=causal, kv_mask=mask, pattern=attn.pattern).backward(grad)
    out.backward(grad.float())
    for name, mine, theirs in zip("qkv", leaves, exact, strict=True):
        torch.testing.assert_close(mine.grad.double(), theirs.grad, rtol=1e-4, atol=1e-5, msg=f"d{name}")


def test_executed_flops_count_the_tiles_the_window_leaves_by_hand():
    """N = M = 64, 16 x 16 tiles, window 16, causal: query chunk 0 computes key chunk 0 only; every later one the chunk
    holding its first row's earliest key and its own diagonal chunk: 16 * (16 + 32 + 32 + 32) scores."""
    attn = build_variant("chunked", query_chunk=16, key_chunk=16, window=16)
    assert attn.executed_flops(1, 1, 64, 64, 8, True) == 4 * 8 * 16 * (16 + 32 + 32 + 32)
    assert build_variant("chunked", query_chunk=16, key_chunk=16).executed_flops(1, 1, 64, 64, 8, True) == 4 * 8 * (
        16 * (16 + 32 + 48 + 64)
    )  # no window: every chunk up to the diagonal
    # the useful count is the band's pairs: row i sees min(i + 1, 16) keys
    assert attn.flops(1, 1, 64, 64, 8, True) == 4 * 8 * (sum(range(1, 17)) + 48 * 16)


def test_a_windowed_kv_cache_step_sees_only_its_window():
    attn = build_variant("chunked", query_chunk=8, key_chunk=16, window=W)
    q, k, v, mask = _inputs(41, 41, 2)
    q, k, v = q.float(), k.float(), v.float()
    with torch.no_grad():
        state = attn.init_state(k[:, :, :40], v[:, :, :40], kv_mask=mask[:, :40])
        out, _ = attn.step(q[:, :, 40:], k[:, :, 40:], v[:, :, 40:], state)
    reference = reference_attention(q.double(), k.double(), v.double(), causal=True, kv_mask=mask, pattern=attn.pattern)
    torch.testing.assert_close(out.double(), reference[:, :, 40:], rtol=1e-5, atol=1e-5)


def test_the_forward_computes_the_tiles_it_counts():
    """The matmuls the forward runs (FlopCounterMode) are executed_flops: the tiles before the band are skipped."""
    attn = build_variant("chunked", query_chunk=16, key_chunk=16, window=16)
    q = torch.randn(1, 1, 64, 8)
    with FlopCounterMode(display=False) as counter:
        attn(q, q, q, causal=True)
    assert counter.get_total_flops() == attn.executed_flops(1, 1, 64, 64, 8, True)
