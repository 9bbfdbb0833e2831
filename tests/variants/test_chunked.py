"""chunked: exact to float64 in value and gradient for any chunking, O(N*c) bytes, causal skips tiles, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.measure.memory import measure_peak_memory
from variants import build_variant, reference_attention
from variants.base import BACKWARD_FLOPS_FACTOR


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


@pytest.mark.parametrize("n", [33, 300])  # 5 and 38 key chunks of 8: rounding in the running sums compounds per chunk
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bfloat16_inputs_are_accumulated_in_float32(n, causal):
    """bf16 in, bf16 out, and the only error is the final rounding to bf16.

    The floor is the float64 answer (from the same bf16 inputs) rounded once to bf16: a relative
    L2 error of ~1.6e-3 (bf16's unit roundoff 2^-8, spread uniformly over the mantissa). Float32
    running sums are ~1e-6 from float64, far below half a bf16 ulp, so the output rounds to the
    same bf16 as the float64 answer except at near-ties: measured ratio 1.00. Running max, sum or
    accumulator kept in bf16 instead gives 2.4x (N=33, causal) to 6.6x (N=300, full) the floor.
    """
    q, k, v = (t.bfloat16() for t in _qkv(n))
    out = build_variant("chunked", query_chunk=64, key_chunk=8)(q, k, v, causal=causal)
    assert out.dtype == torch.bfloat16
    ref = reference_attention(q, k, v, causal=causal)  # float64 from the same bf16 inputs
    floor = _rel(ref.bfloat16(), ref)
    assert 1e-3 < floor < 3e-3  # sanity: this is bf16 rounding, not a zero or broken reference
    assert _rel(out, ref) <= 1.25 * floor


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


def test_backward_skips_tiles_above_the_diagonal_and_costs_the_convention():
    """Backward recomputes S, then P^T dO, dO V^T, dS K, dS^T Q: 5 matmuls per tile, 2.5x the
    forward's 2 (FlashAttention's convention). Causal does the 36 of 64 tiles on or below the diagonal."""
    attn = build_variant("chunked", query_chunk=16, key_chunk=16)
    counted = {}
    for causal in (False, True):
        q, k, v = _qkv(128, b=1, h=1, d=16, requires_grad=True)
        out = attn(q, k, v, causal=causal)
        with FlopCounterMode(display=False) as counter:
            out.backward(torch.randn_like(out))
        counted[causal] = counter.get_total_flops()
    assert counted[False] == BACKWARD_FLOPS_FACTOR * attn.flops(1, 1, 128, 128, 16, False)
    assert counted[True] * 64 == counted[False] * 36


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
