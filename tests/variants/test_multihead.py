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
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, variant=name)
    x = torch.randn(2, 16, 32, requires_grad=True)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 12:] = False
    y = layer(x, kv_mask=mask)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad is not None and layer.q_proj.weight.grad is not None


def test_float16_masked_layer_stays_finite():
    layer = MultiHeadAttention(32, 4, backend="reference").half()
    x = torch.randn(1, 8, 32).half() * 20
    mask = torch.ones(1, 8, dtype=torch.bool)
    mask[0, 5:] = False
    assert torch.isfinite(layer(x, causal=True, kv_mask=mask)).all()


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
    ref = reference_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), causal=True)  # head h reads h // 2
    expected = layer.out_proj(rearrange(ref.float(), "b h n d -> b n (h d)"))
    torch.testing.assert_close(layer(x, causal=True), expected, rtol=1e-5, atol=1e-5)


def test_kv_heads_must_divide_num_heads():
    with pytest.raises(ValueError, match=r"kv_heads \(3\) must divide num_heads \(4\) for grouped-query attention; e.g. kv_heads=2"):
        MultiHeadAttention(32, 4, kv_heads=3)
