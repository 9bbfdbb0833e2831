"""The GQA path of torch without SDPA's enable_gqa (torch < 2.5), forced here: K/V repeated to H heads, still exact."""

from __future__ import annotations

import pytest
import torch

import variants._gqa as gqa
from variants import build_variant, reference_attention


@pytest.mark.parametrize("kv_heads", [2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_without_enable_gqa_repeats_kv_and_stays_exact(monkeypatch, kv_heads, causal):
    monkeypatch.setattr(gqa, "_sdpa_has_enable_gqa", lambda: False)
    called = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def no_enable_gqa(q, k, v, **kwargs):
        assert "enable_gqa" not in kwargs and k.shape[1] == q.shape[1]  # what old torch accepts
        called.append(kwargs)
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_enable_gqa)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 24, 8, generator=g)
    k, v = (torch.randn(2, kv_heads, 24, 8, generator=g) for _ in range(2))
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[1, 17:] = False
    out = build_variant("dense", backend="sdpa")(q, k, v, causal=causal, kv_mask=mask)
    want = reference_attention(q, k, v, causal=causal, kv_mask=mask)
    assert called, "the sdpa backend did not go through the fallback"
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
