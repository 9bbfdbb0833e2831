"""int8 scores (a call's ``int8_scores=True``, variants._int8_scores): by value on hand-made rows, dense's output
error on gaussian inputs, and, over the whole registry, every variant either honours it or refuses it by name."""

from __future__ import annotations

import pytest
import torch

from tests.variants.test_contract import _build, _cases, _rel_l2
from variants import NotSupportedError, build_variant, reference_attention
from variants._int8_scores import int8_scores, int8_scores_reasons

REFUSAL = "does not support scores computed from int8 Q and K (int8_scores=True); Capabilities.int8_scores is False"


def test_the_scores_of_hand_made_rows_are_their_exact_integer_products_times_the_two_scales():
    # rows on their int8 grids: q row 0 = 0.5 x [127, -64, 32, 0], row 1 = 0.01 x [0, 0, 127, 1]; k = 0.25 x [...], ...
    q8 = torch.tensor([[127, -64, 32, 0], [0, 0, 127, 1]])
    k8 = torch.tensor([[10, 127, -127, 1], [-127, 3, 0, 0], [127, 127, 127, 127]])
    sq, sk = torch.tensor([0.5, 0.01]), torch.tensor([0.25, 2.0, 1 / 127])
    q, k = (q8 * sq[:, None]).view(1, 1, 2, 4), (k8 * sk[:, None]).view(1, 1, 3, 4)
    exact = (q8 @ k8.T).double() * sq.double()[:, None] * sk.double()[None, :]  # the integer products, rescaled
    scores = int8_scores(q, k)
    assert scores.dtype == torch.float32 and scores.shape == (1, 1, 2, 3)
    assert torch.allclose(scores[0, 0].double(), exact, rtol=1e-6, atol=0)
    assert scores[0, 0, 0, 0].item() == (127 * 10 - 64 * 127 - 32 * 127) * 0.5 * 0.25  # -1524.0, exactly


def test_off_grid_rows_are_rounded_to_int8_before_the_product():
    q = torch.tensor([[[[1.0, 0.3]]]])  # 0.3 x 127 = 38.1 -> 38: the score carries the rounding
    k = torch.tensor([[[[0.0, 1.0]]]])
    assert int8_scores(q, k).item() == pytest.approx(38 / 127, rel=1e-6) != pytest.approx(0.3, rel=1e-6)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_dense_with_int8_scores_costs_a_bounded_nonzero_error_on_gaussian_inputs(causal, kv_heads):
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 96, 64, generator=g), *torch.randn(2, 2, kv_heads, 96, 64, generator=g)
    mask = torch.ones(2, 96, dtype=torch.bool)
    mask[1, 80:] = False  # a padded row
    ref = reference_attention(q.double(), k.double(), v.double(), causal=causal, kv_mask=mask)
    dense = build_variant("dense")
    error = _rel_l2(dense(q, k, v, causal=causal, kv_mask=mask, int8_scores=True), ref)
    plain = _rel_l2(dense(q, k, v, causal=causal, kv_mask=mask), ref)
    assert plain < 1e-5 and 1e-3 < error < 2e-2  # int8 rounding shows (~0.8%); a path that skips it would not


@pytest.mark.parametrize("name,backend", _cases())
def test_every_variant_honours_int8_scores_within_two_percent_or_refuses_them_by_name(name, backend):
    attn = _build(name, backend)
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 2, 2, 64, 32, generator=g)
    reasons = attn.not_supported_reasons(q, k, v, int8_scores=True, training=False)
    if not attn.capabilities.int8_scores:
        assert REFUSAL in reasons
        with pytest.raises(NotSupportedError, match="Capabilities.int8_scores is False"), torch.no_grad():
            attn(q, k, v, int8_scores=True)
    elif reasons:
        assert any("int8" in r for r in reasons), reasons  # a backend that cannot run them says so
    else:
        with torch.no_grad():
            plain, int8 = attn(q, k, v), attn(q, k, v, int8_scores=True)
        assert 1e-4 < _rel_l2(int8, plain) < 2e-2


def test_a_named_backend_without_int8_scores_is_refused_and_auto_takes_the_textbook():
    q, k, v = torch.randn(3, 1, 2, 32, 16)
    sdpa = build_variant("dense", backend="sdpa")
    assert sdpa.not_supported_reasons(q, k, v, int8_scores=True) == [
        "backend 'sdpa' cannot apply scores computed from int8 Q and K (int8_scores=True); use 'reference' or 'auto'"
    ]
    auto, textbook = build_variant("dense"), build_variant("dense", backend="reference")
    assert torch.equal(auto(q, k, v, int8_scores=True), textbook(q, k, v, int8_scores=True))


def test_int8_scores_must_be_a_bool_and_false_is_the_float_path():
    q, k, v = torch.randn(3, 1, 2, 32, 16)
    dense = build_variant("dense")
    with pytest.raises(TypeError, match="int8_scores must be True, False or None, got 'yes'"):
        dense(q, k, v, int8_scores="yes")
    assert torch.equal(dense(q, k, v, int8_scores=False), dense(q, k, v))


def test_off_cuda_the_integer_kernel_takes_any_shape():
    q, k = torch.randn(1, 2, 4, 60), torch.randn(1, 2, 30, 60)  # 4 rows, D and M not multiples of 8
    assert int8_scores_reasons(q, k) == []
    assert int8_scores(q, k).shape == (1, 2, 4, 30)


@pytest.mark.cuda
def test_on_cuda_shapes_the_integer_kernel_cannot_take_are_refused_and_others_match_the_cpu():
    """The GPU check runs it: torch._int_mm's CUDA shape rule, and the CUDA scores equal the CPU's."""
    q, k = torch.randn(1, 2, 4, 60), torch.randn(1, 2, 30, 60)
    reasons = int8_scores_reasons(q.cuda(), k.cuda())
    assert reasons and "got 4 rows, D=60, M=30" in reasons[0]
    q, k = torch.randn(1, 2, 32, 64), torch.randn(1, 2, 48, 64)
    assert int8_scores_reasons(q.cuda(), k.cuda()) == []
    assert torch.allclose(int8_scores(q.cuda(), k.cuda()).cpu(), int8_scores(q, k), rtol=1e-6, atol=1e-6)
