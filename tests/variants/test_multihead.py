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
