"""chunked: exact to float64 in value and gradient for any chunking, O(N*c) bytes, causal skips tiles, bad input."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.measure.memory import measure_peak_memory
from variants import build_variant, reference_attention


def _qkv(n: int, m: int | None = None, *, b: int = 2, h: int = 2, d: int = 16, seed: int = 0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    shapes = [(b, h, n, d), (b, h, m, d), (b, h, m, d)]
    return [torch.randn(s, generator=g).requires_grad_(requires_grad) for s in shapes]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("chunks", [(1, 64), (64, 1), (5, 7), (1024, 1024)], ids=str)
@pytest.mark.parametrize("n,m,causal", [(37, 37, True), (37, 37, False), (19, 37, False), (50, 20, False)])
@pytest.mark.parametrize("padded", [False, True], ids=["", "padded"])
def test_value_and_gradients_match_float64(chunks, n, m, causal, padded):
    attn = build_variant("chunked", query_chunk=chunks[0], key_chunk=chunks[1])
    q, k, v = _qkv(n, m, requires_grad=True)
    mask = None
    if padded:
        mask = torch.rand(2, m, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[1, : m // 2] = False  # a long run of padding: whole key chunks that see nothing
        mask[:, -1] = True
    out = attn(q, k, v, causal=causal, kv_mask=mask)
    rows = torch.ones(2, n, dtype=torch.bool) if mask is None or n != m else mask  # padded queries: unspecified
    weight = torch.randn_like(out) * rows[:, None, :, None]
    (out * weight).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, causal=causal, kv_mask=mask)
    (ref * weight.double()).sum().backward()
    scored = rows[:, None, :, None].expand_as(out)
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
    assert _rel(out[scored], ref[scored]) <= 1e-5
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert _rel(got, want) <= 1e-5


def test_half_precision_in_half_precision_out():
    q, k, v = (t.bfloat16() for t in _qkv(33))
    out = build_variant("chunked", query_chunk=8, key_chunk=8)(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    assert _rel(out, reference_attention(q, k, v, causal=True)) < 2e-2


def _counted_flops(attn, n: int, causal: bool) -> int:
    q, k, v = _qkv(n, b=1, h=1, d=32)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        attn(q, k, v, causal=causal)
    return counter.get_total_flops()


def test_causal_skips_key_chunks_above_the_diagonal():
    """8 x 8 tiles: causal computes the 36 on or below the diagonal, not 64."""
    attn = build_variant("chunked", query_chunk=32, key_chunk=32)
    full, causal = _counted_flops(attn, 256, False), _counted_flops(attn, 256, True)
    assert full == attn.flops(1, 1, 256, 256, 32, False)  # every tile, counted as dense
    assert causal * 64 == full * 36


def _peak(attn, n: int, *, train: bool) -> int:
    q, k, v = _qkv(n, b=1, h=2, d=32, requires_grad=train)
    if train:
        return measure_peak_memory(lambda: attn(q, k, v).sum().backward(), "cpu").bytes
    with torch.no_grad():
        return measure_peak_memory(lambda: attn(q, k, v), "cpu").bytes


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_memory_is_linear_in_n_and_far_below_dense(train):
    chunked = build_variant("chunked", query_chunk=128, key_chunk=128)
    dense = build_variant("dense", backend="reference")
    small, large = _peak(chunked, 512, train=train), _peak(chunked, 1024, train=train)
    assert large / small < 2.6  # O(N*c): tiles are fixed, only O(N*D) buffers grow
    dense_small, dense_large = _peak(dense, 512, train=train), _peak(dense, 1024, train=train)
    assert dense_large / dense_small > 3.0  # the N x N scores
    assert large * 8 < dense_large


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (dict(query_chunk=0), ValueError, "query_chunk must be >= 1, got 0"),
        (dict(key_chunk=-4), ValueError, "key_chunk must be >= 1, got -4"),
        (dict(query_chunk=1.5), TypeError, r"query_chunk must be an integer, got 1.5 \(float\)"),
        (dict(key_chunk="64"), TypeError, "key_chunk must be an integer, got '64'"),
        (dict(key_chunk=True), TypeError, "key_chunk must be an integer, got True"),
    ],
)
def test_bad_chunks_are_refused(fields, error, match):
    with pytest.raises(error, match=match):
        build_variant("chunked", **fields)
