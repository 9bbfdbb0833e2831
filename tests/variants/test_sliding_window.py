"""sliding_window: the band convention, every CPU backend exact to it, O(N*w) growth in bytes and FLOPs, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from harness.measure.memory import measure_peak_memory
from variants import NotSupportedError, build_variant, reference_attention
from variants.base import BACKWARD_FLOPS_FACTOR
from variants.reference import visibility
from variants._band import band_pairs
from variants._checks import query_offset
from variants.sliding_window import _flex_block_mask

CPU_EXACT_BACKENDS = ["banded", "masked"]  # flex is checked separately: each new shape compiles
# FlopCounterMode has no formula for SDPA's fused CPU kernel; count it like the CUDA ones (QK^T and PV).
CPU_SDPA_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *_, out_shape=None, **__: (
        sdpa_flop_count(q, k, v)
    ),
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda grad_out, q, k, v, *_, out_shape=None, **__: (
        sdpa_backward_flop_count(grad_out, q, k, v)
    ),
}


def _qkv(n: int, m: int | None = None, *, b: int = 2, h: int = 2, d: int = 16, seed: int = 0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    shapes = [(b, h, n, d), (b, h, m, d), (b, h, m, d)]
    return [torch.randn(s, generator=g).requires_grad_(requires_grad) for s in shapes]


def _mask(b: int, m: int, seed: int = 1) -> torch.Tensor:
    mask = torch.rand(b, m, generator=torch.Generator().manual_seed(seed)) > 0.3
    mask[:, 0] = True
    return mask


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("causal,want", [(True, [0, 1, 1, 1, 0, 0]), (False, [0, 1, 1, 1, 1, 1])])
def test_window_convention(causal, want):
    """window=3 at query 3 of 6: causal sees keys 1..3 (i-3 < j <= i); non-causal sees 1..5 (|i-j| < 3)."""
    attn = build_variant("sliding_window", window=3)
    seen = visibility(torch.tensor([3]), 6, causal=causal, pattern=attn.pattern)[0, 0, 0].int().tolist()
    assert seen == want


@pytest.mark.parametrize("backend", CPU_EXACT_BACKENDS)
@pytest.mark.parametrize("window", [1, 4, 29, 500])
@pytest.mark.parametrize(
    "n,m,causal", [(37, 37, True), (37, 37, False), (19, 37, False), (50, 20, False), (130, 130, True)]
)
@pytest.mark.parametrize("padded", [False, True], ids=["", "padded"])
def test_backends_match_float64_band_reference(backend, window, n, m, causal, padded):
    attn = build_variant("sliding_window", window=window, backend=backend)
    q, k, v = _qkv(n, m)
    mask = _mask(2, m) if padded else None
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask)
    ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
    assert torch.isfinite(out).all()
    assert _rel(out, ref) < 2e-6  # every row, padded and key-less ones included (the reference gives zeros)


@pytest.mark.parametrize("backend", CPU_EXACT_BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [45, 150])  # banded: one block of 64 queries, and three (the last ragged)
def test_gradients_match_float64_band_reference(backend, causal, n):
    attn = build_variant("sliding_window", window=7, backend=backend)
    q, k, v = _qkv(n, requires_grad=True)
    mask = _mask(2, n)
    out = attn(q, k, v, causal=causal, kv_mask=mask)
    weight = torch.randn_like(out) * mask[:, None, :, None]  # padded query rows are unspecified: not scored
    (out * weight).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, causal=causal, kv_mask=mask, pattern=attn.pattern)
    (ref * weight.double()).sum().backward()
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert _rel(got, want) < 1e-5


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_flex_matches_reference_on_cpu():
    """One compiled graph, several block masks: ragged N, cross-attention, padding, a band narrower than a block."""
    attn = build_variant("sliding_window", window=5, backend="flex")
    for n, m, causal, padded in [(37, 37, True, True), (37, 37, False, False), (150, 150, True, False)]:
        q, k, v = _qkv(n, m)
        mask = _mask(2, m) if padded else None
        with torch.no_grad():
            out = attn(q, k, v, causal=causal, kv_mask=mask)
        ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
        assert _rel(out, ref) < 2e-6, (n, m, causal, padded)


@pytest.mark.parametrize(
    "n,m,window,causal", [(300, 300, 5, True), (300, 300, 130, False), (200, 333, 64, False), (37, 37, 256, True)]
)
def test_flex_block_mask_equals_torch_builder(n, m, window, causal):
    """Our block mask (from block corners, no N x M tensor) classifies blocks exactly as create_block_mask does."""
    from torch.nn.attention.flex_attention import create_block_mask

    ours = _flex_block_mask(n, m, window, causal, torch.device("cpu"))
    theirs = create_block_mask(ours.mask_mod, None, None, n, m, device="cpu")
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    assert torch.equal(ours.full_kv_num_blocks, theirs.full_kv_num_blocks)


def test_prepare_reports_setup_seconds_and_banded_chooses_its_block_once():
    from variants.sliding_window import _BLOCK_CHOICES, _FASTEST_BLOCK, _block_key

    q, k, v = _qkv(37)
    banded = build_variant("sliding_window", window=6, backend="banded")
    _FASTEST_BLOCK.pop(_block_key(q, 6, True, 0), None)
    assert banded.prepare(q, k, v, causal=True) > 0.0  # timed each block size on these inputs
    assert _FASTEST_BLOCK[_block_key(q, 6, True, 0)] in _BLOCK_CHOICES
    assert banded.prepare(q, k, v, causal=True) == 0.0  # chosen once per device and shape
    assert build_variant("sliding_window", window=5, backend="flex").prepare(q, k, v, causal=True) > 0.0


@pytest.mark.parametrize("block", [8, 32, 64])
@pytest.mark.parametrize("causal,sinks,padded", [(True, 3, False), (False, 0, True), (True, 2, True)])
def test_banded_is_exact_at_every_block_size(block, causal, sinks, padded):
    from variants.sliding_window import _banded

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 50, 16, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 50, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    kv_mask = (torch.rand(2, 50, generator=gen) > 0.3) if padded else None
    attn = build_variant("sliding_window", window=7, sinks=sinks)
    out = _banded(q, k, v, 7, causal=causal, kv_mask=kv_mask, sinks=sinks, block=block)
    ref = reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, pattern=attn.pattern)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


def _peak_bytes(attn, n: int, *, train: bool) -> int:
    q, k, v = _qkv(n, b=1, h=2, d=32, requires_grad=train)
    if train:
        return measure_peak_memory(lambda: attn(q, k, v, causal=True).sum().backward(), "cpu").bytes
    with torch.no_grad():
        return measure_peak_memory(lambda: attn(q, k, v, causal=True), "cpu").bytes


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_banded_memory_grows_linearly_and_masked_quadratically(train):
    banded = build_variant("sliding_window", window=64, backend="banded")
    masked = build_variant("sliding_window", window=64, backend="masked")
    small, large = _peak_bytes(banded, 1024, train=train), _peak_bytes(banded, 2048, train=train)
    assert 1.5 < large / small < 2.5
    dense_small, dense_large = _peak_bytes(masked, 1024, train=train), _peak_bytes(masked, 2048, train=train)
    assert dense_large / dense_small > 3.0
    assert large < dense_large / 4


def test_banded_work_is_linear_in_n_and_near_the_band():
    attn = build_variant("sliding_window", window=64, backend="banded")
    counted = {}
    for n in (1024, 2048):
        q, k, v = _qkv(n, b=1, h=2, d=32)
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as counter, torch.no_grad():
            attn(q, k, v, causal=True)
        counted[n] = counter.get_total_flops()
    assert 1.9 < counted[2048] / counted[1024] < 2.1
    band = attn.flops(1, 2, 2048, 2048, 32, True)
    assert band <= counted[2048] < 2.5 * band  # blocks touch (b + w - 1) keys per query for w useful ones


def test_banded_backward_work_is_the_convention_times_its_forward():
    """Training through the blocks: SDPA's backward per block is 2.5x its forward (FlashAttention's
    convention), so the backward stays linear in N and near the band like the forward."""
    attn = build_variant("sliding_window", window=64, backend="banded")
    counted = {}
    for n in (1024, 2048):
        q, k, v = _qkv(n, b=1, h=2, d=32, requires_grad=True)
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as forward:
            out = attn(q, k, v, causal=True)
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as backward:
            out.backward(torch.randn_like(out))
        assert backward.get_total_flops() == BACKWARD_FLOPS_FACTOR * forward.get_total_flops()
        counted[n] = backward.get_total_flops()
    assert 1.9 < counted[2048] / counted[1024] < 2.1
    band = attn.flops(1, 2, 2048, 2048, 32, True)
    assert counted[2048] < 2.5 * BACKWARD_FLOPS_FACTOR * band


def test_flops_count_the_band():
    attn = build_variant("sliding_window", window=256)
    assert attn.flops(1, 8, 8192, 8192, 64, True) == 4 * 8 * 64 * (256 * 257 // 2 + (8192 - 256) * 256)
    # Past the first window each query adds exactly `window` pairs: linear in N.
    assert attn.flops(1, 1, 4096, 4096, 64, True) - attn.flops(1, 1, 2048, 2048, 64, True) == 4 * 64 * 2048 * 256
    for n, m, window, causal in [(6, 6, 3, False), (5, 9, 3, False), (9, 4, 2, False), (7, 7, 3, True)]:
        small = build_variant("sliding_window", window=window)
        visible = visibility(torch.arange(n), m, causal=causal, pattern=small.pattern)
        assert band_pairs(n, m, window, causal) == int(visible.sum())


def test_auto_picks_banded_on_cpu_in_both_modes():
    attn = build_variant("sliding_window")
    q = torch.randn(1, 1, 8, 4)
    assert attn.resolve_backend(q, training=False) == "banded"
    assert attn.resolve_backend(q, training=True) == "banded"


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (dict(window=0), ValueError, "window must be >= 1, got 0"),
        (dict(window=2.5), TypeError, "window must be an integer, got 2.5"),
        (dict(backend="bandd"), ValueError, "backend must be one of .*Did you mean 'banded'"),
    ],
)
def test_bad_config_is_refused(fields, error, match):
    with pytest.raises(error, match=match):
        build_variant("sliding_window", **fields)


def test_flex_training_on_cpu_is_declared_unsupported_with_reason():
    attn = build_variant("sliding_window", window=4, backend="flex")
    q, k, v = _qkv(16, requires_grad=True)
    assert any("forward-only" in r for r in attn.not_supported_reasons(q, k, v))
    with pytest.raises(NotSupportedError, match=r"forward-only there\); use backend 'banded'"):
        attn(q, k, v)


def test_xformers_off_cuda_is_declared_unsupported_with_reason():
    attn = build_variant("sliding_window", backend="xformers")
    q, k, v = _qkv(16)
    with pytest.raises(NotSupportedError, match="needs a CUDA device"):
        attn(q, k, v, causal=True)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["xformers", "flex", "banded", "masked"])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_backends_match_reference(backend, causal):
    attn = build_variant("sliding_window", window=40, backend=backend)
    q, k, v = (t.to("cuda", torch.bfloat16) for t in _qkv(300, d=64))
    if attn.not_supported_reasons(q, k, v, causal=causal):
        pytest.skip("; ".join(attn.not_supported_reasons(q, k, v, causal=causal)))
    with torch.no_grad():
        out = attn(q, k, v, causal=causal)
    ref = reference_attention(q, k, v, causal=causal, pattern=attn.pattern)
    assert _rel(out, ref) < 2e-2


@pytest.mark.parametrize(
    "n,m,window,sinks,causal", [(9, 9, 2, 3, True), (9, 9, 2, 3, False), (5, 12, 3, 8, False), (7, 7, 3, 20, True)]
)
def test_band_pairs_count_the_sinks_once(n, m, window, sinks, causal):
    attn = build_variant("sliding_window", window=window, sinks=sinks)
    visible = visibility(torch.arange(n), m, causal=causal, pattern=attn.pattern)
    assert band_pairs(n, m, window, causal, sinks=sinks) == int(visible.sum())
    assert attn.flops(1, 1, n, m, 4, causal) == 16 * int(visible.sum())


@pytest.mark.parametrize(
    "n,m,window,sinks,causal", [(300, 300, 5, 3, True), (300, 300, 130, 140, False), (200, 333, 64, 200, True)]
)
def test_flex_block_mask_with_sinks_covers_the_pattern(n, m, window, sinks, causal):
    """Every visible pair lies in a block the mask keeps (partial or full), and full blocks are wholly visible."""
    ours = _flex_block_mask(n, m, window, causal, torch.device("cpu"), sinks=sinks)
    attn = build_variant("sliding_window", window=window, sinks=sinks)
    positions = torch.arange(n) + query_offset(n, m, causal)  # causal n < m: the last n positions
    visible = visibility(positions, m, causal=causal, pattern=attn.pattern)[0, 0]  # (n, m)
    kept = ours.to_dense()[0, 0].bool()  # (QB, KB)
    S = 128
    for qb in range(kept.shape[0]):
        for kb in range(kept.shape[1]):
            tile = visible[qb * S : (qb + 1) * S, kb * S : (kb + 1) * S]
            if tile.any():
                assert kept[qb, kb], (qb, kb)
        full = ours.full_kv_indices[0, 0, qb, : int(ours.full_kv_num_blocks[0, 0, qb])].tolist()
        for kb in full:  # a full block skips the mask_mod, so every pair in it must be visible
            assert visible[qb * S : (qb + 1) * S, kb * S : (kb + 1) * S].all(), (qb, kb)


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_flex_with_sinks_spanning_whole_blocks_matches_reference():
    """sinks=140 > one 128-key block: that block is 'full' for late queries, so it skips the mask_mod."""
    causal = True
    attn = build_variant("sliding_window", window=20, sinks=140, backend="flex")
    q, k, v = _qkv(300, h=4)
    k, v = k[:, :2], v[:, :2]  # GQA as well: 4 query heads on 2 K/V heads
    with torch.no_grad():
        out = attn(q, k, v, causal=causal)
    assert _rel(out, reference_attention(q, k, v, causal=causal, pattern=attn.pattern)) < 2e-6
