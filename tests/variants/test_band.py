"""variants._band: the one band predicate, and what is counted or computed without it checked against it."""

from __future__ import annotations

import pytest
import torch

from variants import build_variant
from variants._band import band, band_pairs
from variants._checks import query_offset
from variants.reference import visibility

# (N, M, causal): ragged against banded's 64-row blocks, N > M (key-less rows), and causal N < M (the last N positions).
SHAPES = [(100, 100, True), (100, 100, False), (130, 130, True), (70, 90, False), (90, 70, False), (70, 150, True)]
WINDOWS = [1, 5, 64, 100, 300]  # 100 and 300: window >= N
SINKS = [0, 3, 70]  # 70: sinks spanning a whole block of 64


def _positions(n: int, m: int, causal: bool) -> torch.Tensor:
    """The n queries' positions among m keys: the last n under causal (bottom-right)."""
    return torch.arange(n) + query_offset(n, m, causal)


def _picture(n: int, m: int, window: int, causal: bool, sinks: int) -> torch.Tensor:
    """The predicate's N x M picture."""
    return band(_positions(n, m, causal)[:, None], torch.arange(m)[None, :], window=window, causal=causal, sinks=sinks)


@pytest.mark.parametrize(
    "query,window,sinks,causal,want",
    [
        (3, 2, 1, True, [1, 0, 1, 1, 0, 0]),  # the sink 0 and 3 - 2 < j <= 3
        (3, 2, 1, False, [1, 0, 1, 1, 1, 0]),  # the sink 0 and |3 - j| < 2
        (1, 1, 3, True, [1, 1, 0, 0, 0, 0]),  # a sink after the query stays hidden when causal
        (1, 1, 3, False, [1, 1, 1, 0, 0, 0]),
    ],
)
def test_predicate_convention(query, window, sinks, causal, want):
    got = band(torch.tensor(query), torch.arange(6), window=window, causal=causal, sinks=sinks)
    assert got.int().tolist() == want


@pytest.mark.parametrize("n,m,causal", SHAPES + [(5, 12, False), (9, 4, False), (1, 1, True), (1, 12, True)])
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("sinks", SINKS + [200])
def test_pairs_and_pattern_agree_with_the_predicate(n, m, causal, window, sinks):
    """band_pairs (closed form) counts the picture; the variant's pattern plus the reference's causality draws it."""
    picture = _picture(n, m, window, causal, sinks)
    assert band_pairs(n, m, window, causal, sinks=sinks) == int(picture.sum())
    attn = build_variant("sliding_window", window=window, sinks=sinks)
    drawn = visibility(_positions(n, m, causal), m, causal=causal, pattern=attn.pattern)[0, 0]
    assert torch.equal(drawn, picture)


@pytest.mark.parametrize("n,m,causal", SHAPES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("sinks", SINKS)
@pytest.mark.parametrize("padded", [False, True], ids=["", "padded"])
def test_banded_mixes_exactly_the_predicates_keys(n, m, causal, window, sinks, padded):
    """banded keeps its own block loop; with q = 0 every visible key gets the same weight and V = identity
    prints the weights, so each output row is the predicate's row (and padding) divided by its count."""
    attn = build_variant("sliding_window", window=window, sinks=sinks, backend="banded")
    q = torch.zeros(1, 2, n, m)  # two query heads on one K/V head: GQA's stacked rows too
    k = torch.randn(1, 1, m, m, generator=torch.Generator().manual_seed(0))
    v = torch.eye(m)[None, None]  # (1, 1, M, M): output row i = attention weights of query i
    mask = torch.rand(1, m, generator=torch.Generator().manual_seed(1)) > 0.3 if padded else None
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask)  # (1, 2, N, M)
    seen = _picture(n, m, window, causal, sinks) & (True if mask is None else mask)  # (N, M)
    assert torch.equal(out[0] > 0, seen.expand(2, n, m))
    want = seen / seen.sum(-1, keepdim=True).clamp_min(1)  # a key-less row is zeros
    torch.testing.assert_close(out[0], want.expand(2, n, m), rtol=0, atol=1e-6)
