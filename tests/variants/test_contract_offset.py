"""The contract's causal query offset, checked for every registered variant and backend: causal=True with N < M keys,
the queries being the last N positions (bottom-right, as FlashAttention >= 2.1 and torch's causal_lower_right).

Decoding against a KV cache (1 query), speculative verification (4) and chunked prefill (half the keys) are this case.
Parametrized over list_variants(), so a plugin that declares Capabilities.causal_offset is checked with no test code
of its own, and one that does not is checked to refuse it with the reason.
"""

from __future__ import annotations

import pytest
import torch

from tests.variants.test_contract import TOLERANCE, _build, _cases, _rel_l2
from variants import AttentionVariant, Capabilities, NotSupportedError, reference_attention
from variants._band import band

B, H, M, D = 2, 4, 37, 16  # M not a power of two: ragged blocks and chunks
QUERIES = [1, 4, M // 2]  # a decode step, a speculative block, a chunk of the prefill
SETTINGS = {"mha": (H, False), "gqa-padded": (H // 2, True)}  # (K/V heads, padded)


def _inputs(seed: int, n: int, kv_heads: int, *, requires_grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n, D, generator=g)
    k, v = (torch.randn(B, kv_heads, M, D, generator=g) for _ in range(2))
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _padding(padded: bool) -> torch.Tensor | None:
    """Batch 0: left padding (the harness's); batch 1: a hole inside the context. The last key stays real, so every
    query row sees a key."""
    if not padded:
        return None
    mask = torch.ones(B, M, dtype=torch.bool)
    mask[0, :7] = False
    mask[1, M // 2 - 3 : M // 2 + 2] = False
    return mask


def _runnable_or_skip(attn, q, k, v, **kwargs) -> None:
    reasons = attn.not_supported_reasons(q, k, v, causal=True, **kwargs)
    if reasons:
        pytest.skip("declared unsupported: " + "; ".join(reasons))


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("n", QUERIES, ids=lambda n: f"n{n}")
@pytest.mark.parametrize("setting", SETTINGS)
def test_exact_variants_match_the_bottom_right_reference(name, backend, n, setting):
    attn = _build(name, backend)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate: test_offset_rows_are_the_last_rows_of_the_full_causal_call covers it")
    kv_heads, padded = SETTINGS[setting]
    q, k, v = _inputs(1, n, kv_heads)
    mask = _padding(padded)
    _runnable_or_skip(attn, q, k, v, kv_mask=mask, training=False)
    with torch.no_grad():
        out = attn(q, k, v, causal=True, kv_mask=mask)
    ref = reference_attention(q, k, v, causal=True, kv_mask=mask, pattern=attn.pattern)
    assert out.shape == q.shape
    assert _rel_l2(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("n", QUERIES, ids=lambda n: f"n{n}")
@pytest.mark.parametrize("setting", SETTINGS)
def test_offset_rows_are_the_last_rows_of_the_full_causal_call(name, backend, n, setting):
    """Every variant, approximate ones too: the last n queries over all M keys give what the full causal call gives
    on its last n rows (a KV cache changes where a query sits, never what it sees)."""
    attn = _build(name, backend)
    kv_heads, padded = SETTINGS[setting]
    q, k, v = _inputs(2, M, kv_heads)
    mask = _padding(padded)
    _runnable_or_skip(attn, q[:, :, -n:], k, v, kv_mask=mask, training=False)
    with torch.no_grad():
        full = attn(q, k, v, causal=True, kv_mask=mask)
        last = attn(q[:, :, -n:], k, v, causal=True, kv_mask=mask)
    torch.testing.assert_close(last, full[:, :, -n:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,backend", _cases())
def test_causal_with_an_offset_leaks_nothing_from_the_future(name, backend):
    """Query row i sits at position M - N + i: keys after it, and later query rows, change nothing of row i."""
    attn = _build(name, backend)
    n, cut = M // 2, M // 4
    q, k, v = _inputs(3, n, H)
    _runnable_or_skip(attn, q, k, v, training=False)
    position = M - n + cut  # the position of query row `cut`
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[:, :, cut + 1 :] = torch.randn_like(q2[:, :, cut + 1 :]) * 5
    for t in (k2, v2):
        t[:, :, position + 1 :] = torch.randn_like(t[:, :, position + 1 :]) * 5
    with torch.no_grad():
        before = attn(q, k, v, causal=True)[:, :, : cut + 1]
        after = attn(q2, k2, v2, causal=True)[:, :, : cut + 1]
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(attn(q2, k2, v2, causal=True)[:, :, -1], attn(q, k, v, causal=True)[:, :, -1])


@pytest.mark.parametrize("name,backend", _cases())
def test_gradients_with_an_offset_match_the_reference(name, backend):
    """A chunked prefill trains too: the backward under a query offset (padded, GQA) equals the float64 reference's."""
    attn = _build(name, backend)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate")
    q, k, v = _inputs(4, M // 2, H // 2, requires_grad=True)
    mask = _padding(True)
    _runnable_or_skip(attn, q, k, v, kv_mask=mask, training=True)
    weight = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
    (attn(q, k, v, causal=True, kv_mask=mask) * weight).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    (
        reference_attention(q64, k64, v64, causal=True, kv_mask=mask, pattern=attn.pattern) * weight.double()
    ).sum().backward()
    for label, t, t64 in (("q", q, q64), ("k", k, k64), ("v", v, v64)):
        assert _rel_l2(t.grad, t64.grad) < 1e-4, f"gradient of {label} disagrees with the float64 reference"


@pytest.mark.parametrize("name,backend", _cases("cuda"))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_offset_matches_the_reference(name, backend, dtype):
    """4 queries over M keys on each CUDA backend (gpu_check.sh runs it): exact ones against the reference, others
    against their own full causal call's last rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    attn = _build(name, backend).cuda().to(dtype)
    q, k, v = (t.cuda().to(dtype) for t in _inputs(6, 4, H // 2))
    _runnable_or_skip(attn, q, k, v, training=False)
    with torch.no_grad():
        out = attn(q, k, v, causal=True)
        if attn.capabilities.exact:
            want = reference_attention(q, k, v, causal=True, pattern=attn.pattern)
        else:
            earlier = torch.randn(B, H, M - 4, D, device=q.device, dtype=dtype)  # the rows before the 4 queries
            want = attn(torch.cat([earlier, q], dim=2), k, v, causal=True)[:, :, -4:]
    assert _rel_l2(out, want) < {torch.float32: 1e-3, torch.bfloat16: 2e-2}[dtype]


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("n", [1, M // 2], ids=lambda n: f"n{n}")
def test_windowed_is_the_variant_within_a_models_causal_window(name, backend, n):
    """variant.windowed(w) (what the transformers adapter runs in a model's sliding layer) is exact attention under
    the variant's own pattern and the band i - w < j <= i, with a query offset; None refuses the model's window."""
    attn, window = _build(name, backend), 5
    windowed = attn.windowed(window)
    if windowed is None:
        pytest.skip(f"{name} does not honour a model's sliding window (windowed gives None)")
    q, k, v = _inputs(9, n, H // 2)
    _runnable_or_skip(windowed, q, k, v, training=False)
    own = attn.pattern

    def within(query_idx, key_idx):
        inside = band(query_idx[:, None], key_idx[None, :], window=window, causal=True)
        mine = None if own is None else own(query_idx, key_idx)
        return inside if mine is None else inside & mine

    with torch.no_grad():
        out = windowed(q, k, v, causal=True)
    assert _rel_l2(out, reference_attention(q, k, v, causal=True, pattern=within)) < TOLERANCE[torch.float32]


class TopLeftCausal(AttentionVariant):
    """A plugin written before the offset: its causal mask is the N x M lower triangle (top-left), so it declares
    nothing and the base class refuses N < M for it."""

    capabilities = Capabilities(exact=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def test_a_variant_that_does_not_declare_the_offset_is_refused_with_the_reason():
    attn = TopLeftCausal()
    q, k, v = _inputs(7, 4, H)
    reasons = attn.not_supported_reasons(q, k, v, causal=True)
    assert reasons == [
        "does not support causal=True with a query offset (4 queries over 37 keys, the last N positions: decoding "
        "against a KV cache, chunked prefill); Capabilities.causal_offset is False"
    ]
    with pytest.raises(NotSupportedError, match=r"query offset \(4 queries over 37 keys"):
        attn(q, k, v, causal=True)
    assert attn.not_supported_reasons(q, k[:, :, :4], v[:, :, :4], causal=True) == []  # N == M: the plain case
    assert attn.not_supported_reasons(q, k, v, causal=False) == []  # cross-attention needs no offset


def test_the_reference_is_bottom_right_as_torch_defines_it():
    """The float64 reference against torch's own causal_lower_right mask, materialised, with GQA."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = (t.double() for t in _inputs(8, 5, H // 2))
    keep = causal_lower_right(5, M)._materialize(q.device)  # (5, M) bool, True = visible
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
    torch.testing.assert_close(reference_attention(q, k, v, causal=True), expected)
