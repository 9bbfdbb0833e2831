"""Bad input to any variant: one clear TypeError/ValueError naming the argument, given and expected."""

import pytest
import torch

from variants import MultiHeadAttention, build_variant

q = torch.randn(2, 3, 8, 4)


@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [
        (
            (q[0], q, q),
            {},
            ValueError,
            r"q must have 4 dims \(B, H, N, D\), got shape \(3, 8, 4\); for \(B, N, E\) inputs use variants.MultiHeadAttention",
        ),
        (([1.0], q, q), {}, TypeError, r"q must be a torch.Tensor of shape \(B, H, N, D\), got list"),
        ((q, q.long(), q), {}, TypeError, r"k must be a floating-point tensor, got dtype torch.int64"),
        ((q, q.double(), q), {}, TypeError, r"q, k, v must share one dtype, got q=torch.float32, k=torch.float64"),
        ((q, q, q[:, :, :5]), {}, ValueError, r"k and v must have the same shape"),
        (
            (q, q[:, :2], q[:, :2]),
            {},
            ValueError,
            r"k and v have H_kv=2 heads, which does not divide the H=3 query heads \(got q \(2, 3, 8, 4\), k \(2, 2, 8, 4\)\); grouped-query attention needs H % H_kv == 0 .*use H_kv in \(1, 3\)",
        ),
        (
            (q, q[:, :, :5], q[:, :, :5]),
            {"causal": True},
            ValueError,
            r"causal=True needs N <= M \(the N queries are the last N of the M key positions, bottom-right\), got N=8, M=5",
        ),
        ((q, q, q), {"causal": "yes"}, TypeError, r"causal must be a bool, got 'yes'"),
        (
            (q, q, q),
            {"kv_mask": torch.ones(2, 8)},
            TypeError,
            r"kv_mask must have dtype torch.bool .* got torch.float32; convert with kv_mask.bool\(\)",
        ),
        (
            (q, q, q),
            {"kv_mask": torch.ones(2, 7, dtype=torch.bool)},
            ValueError,
            r"kv_mask must have shape \(B, M\) = \(2, 8\), got \(2, 7\)",
        ),
        (
            (q, q, q),
            {"kv_mask": [True] * 8},
            TypeError,
            r"kv_mask must be a bool tensor of shape \(B, M\) or None, got list",
        ),
    ],
)
def test_bad_tensors_get_clear_messages(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        build_variant("dense")(*args, **kwargs)


def test_meta_device_mismatch_is_named():
    with pytest.raises(ValueError, match=r"q, k, v must be on one device, got q=cpu, k=meta, v=cpu"):
        build_variant("dense")(q, q.to("meta"), q)


def test_embed_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"embed_dim \(100\) must be divisible by num_heads \(8\); e.g. num_heads=10"):
        MultiHeadAttention(100, 8)


def test_unknown_backend_through_multihead():
    with pytest.raises(ValueError, match=r"backend must be one of .* got 'flash'"):
        MultiHeadAttention(32, 4, backend="flash")


def test_multihead_checks_its_input_width():
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, embed_dim=32\), got \(2, 5, 16\)"):
        MultiHeadAttention(32, 4)(torch.randn(2, 5, 16))


def test_kv_batch_or_head_dim_mismatch_is_named():
    with pytest.raises(
        ValueError, match=r"k must be \(B=2, H_kv, M, D=4\) to match q \(2, 3, 8, 4\), got \(2, 3, 8, 5\)"
    ):
        build_variant("dense")(q, torch.randn(2, 3, 8, 5), torch.randn(2, 3, 8, 5))
