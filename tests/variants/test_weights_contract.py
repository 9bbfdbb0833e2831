"""attention_weights, checked for every registered variant that gives weights (the AttentionVariant default declines).

Registry-wide like test_contract: the weights applied to v are the variant's own output on the sampled rows (so the
weights are what it computes), and an exact variant's weights are the reference softmax weights under its pattern.
"""

from __future__ import annotations

import pytest
import torch

from harness.measure.reference import topk_recall
from tests.variants.test_contract import _build, _cases, _padding_mask
from variants import attention_weights, get_variant

B, H, N, D = 2, 4, 37, 16
ROWS = torch.tensor([0, 3, 17, 30, 36])


def _qkv(kv_heads: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, N, D, generator=g)
    k, v = (torch.randn(B, kv_heads, N, D, generator=g) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_the_weights_applied_to_v_are_the_output_and_exact_weights_are_the_references(name, backend, causal, padded):
    attn = _build(name, backend).eval()
    kv_heads = 2 if get_variant(name).cls.capabilities.gqa else H
    q, k, v = _qkv(kv_heads)
    mask = _padding_mask(N) if padded else None
    reasons = attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False)
    if reasons:
        pytest.skip("declared unsupported: " + "; ".join(reasons))
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask)
        weights = attn.attention_weights(q, k, causal=causal, kv_mask=mask, rows=ROWS)
    if weights is None:
        pytest.skip(f"{name} declines to give its attention weights")
    assert weights.shape == (B, H, len(ROWS), N)
    G = H // kv_heads
    applied = torch.einsum("bkgrm,bkmd->bkgrd", weights.double().view(B, kv_heads, G, len(ROWS), N), v.double())
    real = torch.ones(B, len(ROWS), dtype=torch.bool) if mask is None else mask[:, ROWS]  # padded rows: unspecified
    got, want = (
        applied.reshape(B, H, len(ROWS), D).transpose(1, 2)[real],
        out[:, :, ROWS].double().transpose(1, 2)[real],
    )
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if attn.capabilities.exact:
        exact = attention_weights(q, k, causal=causal, kv_mask=mask, pattern=attn.pattern, rows=ROWS)
        torch.testing.assert_close(weights.double(), exact, rtol=1e-6, atol=1e-9)
        valid = real
        recall = topk_recall(
            attn, q, k, causal=causal, rows=ROWS, valid=valid, chunk=2, kv_mask=mask, pattern=attn.pattern
        )
        assert recall == 1.0
    if not attn.signed_weights:
        assert float(weights.min()) >= 0  # a distribution: cross-entropy (weight_ce) may use them
