"""MultiHeadAttention: the projections, the per-head scale, masks, and any variant inside."""

import math

import pytest
import torch

from variants import MultiHeadAttention, list_variants


def test_matches_torch_multihead_attention_with_the_same_weights():
    torch.manual_seed(0)
    E, H = 32, 4
    ours = MultiHeadAttention(E, H, variant="dense", backend="reference")
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(2, 10, E)
    pad = torch.ones(2, 10, dtype=torch.bool)
    pad[1, 7:] = False
    causal = torch.ones(10, 10, dtype=torch.bool).triu(1)
    expected, _ = theirs(x, x, x, key_padding_mask=~pad, attn_mask=causal, need_weights=False)
    got = ours(x, causal=True, kv_mask=pad)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_scale_is_per_head_not_per_model_width():
    """With one key the output is v regardless of scale, so use two keys with known logits."""
    E, H = 64, 4
    layer = MultiHeadAttention(E, H, bias=False)
    with torch.no_grad():
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.weight.copy_(torch.eye(E))
    x = torch.zeros(1, 2, E)
    x[0, 0, :] = 1.0  # q0 . k0 = 16 per head (head_dim 16); q0 . k1 = 0
    out = layer(x)
    p = 1 / (1 + math.exp(-16 / math.sqrt(16)))  # softmax weight on key 0 with scale 1/sqrt(head_dim)
    torch.testing.assert_close(out[0, 0, 0], torch.tensor(p), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list_variants())
def test_every_variant_works_inside_the_layer(name):
    """Any variant in the layer: padding is honoured end to end, and exact ones equal the dense layer.

    Default configs: at N = 16 sliding_window's window (256) and chunked's chunks (1024) cover the
    whole sequence, so every exact variant must give the dense layer's numbers here.
    """
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, variant=name)
    x = torch.randn(2, 16, 32, requires_grad=True)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 12:] = False
    mask[1, [3, 9]] = False
    real = mask[:, :, None].expand(2, 16, 32)
    y = layer(x, kv_mask=mask)
    assert y.shape == x.shape and torch.isfinite(y).all()
    (y * real).sum().backward()  # a loss on the real tokens only
    assert x.grad is not None and layer.q_proj.weight.grad is not None
    assert layer.q_proj.weight.grad.abs().sum() > 0
    # A padded token is neither a key nor a value: it has no path to a real token's output.
    assert torch.count_nonzero(x.grad[~real]) == 0 and x.grad[real].abs().sum() > 0
    with torch.no_grad():
        x2 = torch.where(real, x, torch.randn_like(x) * 10)
        torch.testing.assert_close(layer(x2, kv_mask=mask)[real], y[real], rtol=1e-5, atol=1e-5)
    if not layer.attention.capabilities.exact:
        return
    dense = MultiHeadAttention(32, 4, variant="dense", backend="reference")
    dense.load_state_dict(layer.state_dict())  # exact variants have no parameters of their own
    with torch.no_grad():
        for causal in (False, True):
            torch.testing.assert_close(
                layer(x, causal=causal, kv_mask=mask), dense(x, causal=causal, kv_mask=mask), rtol=1e-5, atol=1e-5
            )


def test_float16_masked_layer_stays_finite_and_accurate():
    """Large fp16 activations (x * 20: logits ~130 rms) with causal + padding: finite, and close to float64.

    Compared with the float64 layer holding the same (fp16-rounded) weights, so only fp16 arithmetic
    differs. u = 2^-11. The q, k, v projections round once each (CPU accumulates fp16 matmuls in
    float32), the attention output and out_proj once more: a few independent roundings of relative
    RMS ~u/sqrt(3) each, ~u in all. Measured 3.1e-4 for this seed (3.1e-4 to 4.4e-4 over seeds 0-5).
    The logits are so large that rounding q and k moves one by ~u*|s| ~ 0.06; where the top two keys
    nearly tie that shifts the output far more (other draws of x reach 4e-3), so this is a bound for
    this seeded input, not for any input. Bound 4u = 2e-3, 6x the measured error; the old check
    (finite only) passed any wrong value.
    """
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, backend="reference").half()
    exact = MultiHeadAttention(32, 4, backend="reference").double()
    exact.load_state_dict(layer.state_dict())  # the same fp16 weights, exactly, in float64
    x = (torch.randn(1, 8, 32) * 20).half()
    mask = torch.ones(1, 8, dtype=torch.bool)
    mask[0, 5:] = False
    with torch.no_grad():
        y = layer(x, causal=True, kv_mask=mask)
        want = exact(x.double(), causal=True, kv_mask=mask)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    assert float((y.double() - want).norm() / want.norm()) < 4 * 2.0**-11


@pytest.mark.parametrize("name", list_variants())
@pytest.mark.parametrize("kv_heads", [2, 1])
def test_grouped_query_layer_works_for_every_variant(name, kv_heads):
    torch.manual_seed(0)
    config = {"heads": kv_heads} if name == "linformer" else {}
    layer = MultiHeadAttention(32, 4, variant=name, kv_heads=kv_heads, **config)
    assert layer.k_proj.out_features == layer.v_proj.out_features == kv_heads * 8
    x = torch.randn(2, 16, 32, requires_grad=True)
    y = layer(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert layer.k_proj.weight.grad is not None


def test_grouped_query_layer_equals_the_reference_on_its_projections():
    from einops import rearrange

    from variants import reference_attention

    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, variant="dense", kv_heads=2)
    x = torch.randn(2, 10, 32)
    q = rearrange(layer.q_proj(x), "b n (h d) -> b h n d", h=4)
    k, v = (rearrange(p(x), "b n (h d) -> b h n d", h=2) for p in (layer.k_proj, layer.v_proj))
    ref = reference_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), causal=True
    )  # head h reads h // 2
    expected = layer.out_proj(rearrange(ref.float(), "b h n d -> b n (h d)"))
    torch.testing.assert_close(layer(x, causal=True), expected, rtol=1e-5, atol=1e-5)


def test_kv_heads_must_divide_num_heads():
    with pytest.raises(
        ValueError, match=r"kv_heads \(3\) must divide num_heads \(4\) for grouped-query attention; e.g. kv_heads=2"
    ):
        MultiHeadAttention(32, 4, kv_heads=3)
