"""The contract's model features, checked for every registered variant and backend: logit softcapping (`softcap=`,
Gemma 2's scores s -> softcap * tanh(s / softcap)) and learned sink logits (`sink_logits=` (H,), gpt-oss's s_aux: one
logit per query head in the softmax's denominator, no value).

Parametrized over list_variants(), so a plugin that declares Capabilities.softcap or .sink_logits is checked against
the float64 reference with no test code of its own, and one that does not is checked to refuse the feature by name.
"""

from __future__ import annotations

import pytest
import torch

from tests.variants.test_contract import TOLERANCE, _build, _cases, _rel_l2
from tests.variants.test_contract_offset import B, H, M, _inputs, _padding
from variants import AttentionVariant, Capabilities, NotSupportedError, reference_attention

SOFTCAP = 5.0  # on scores scaled up by SCORE_GAIN**2 the cap bites: tanh saturates for |s| >> 5
SCORE_GAIN = {"softcap": 3.0, "sink_logits": 1.0}  # q and k scaled by this: scores of ~ +-10 for the cap
SETTINGS = {"mha": (H, False), "gqa-padded": (H // 2, True)}  # (K/V heads, padded)
QUERIES = {"square": M, "offset": 4}  # N == M, and 4 queries over M keys (causal: the last 4 positions)
FEATURE_NAME = {"softcap": "logit softcapping", "sink_logits": "learned sink logits"}


def _sink_logits(seed: int = 11) -> torch.Tensor:
    """One logit per query head, around a row's log-sum-exp (~ log M), so the sink takes a real share of each row."""
    return torch.randn(H, generator=torch.Generator().manual_seed(seed)) * 2 + 3


def _feature(feature: str) -> dict:
    return {"softcap": SOFTCAP} if feature == "softcap" else {"sink_logits": _sink_logits()}


def _scaled_inputs(
    seed: int, n: int, kv_heads: int, *, feature: str = "softcap", requires_grad: bool = False
) -> list[torch.Tensor]:
    q, k, v = _inputs(seed, n, kv_heads)
    q, k = q * SCORE_GAIN[feature], k * SCORE_GAIN[feature]
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _claims(attn: AttentionVariant, feature: str) -> bool:
    return bool(getattr(attn.capabilities, feature))


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("feature", FEATURE_NAME)
@pytest.mark.parametrize("queries", QUERIES)
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_variants_claiming_a_feature_match_the_reference_with_it(name, backend, feature, queries, setting, causal):
    attn = _build(name, backend)
    if not _claims(attn, feature):
        pytest.skip(f"{name} does not claim Capabilities.{feature}: test_unclaimed_features_are_refused covers it")
    kv_heads, padded = SETTINGS[setting]
    q, k, v = _scaled_inputs(12, QUERIES[queries], kv_heads, feature=feature)
    mask, features = _padding(padded), _feature(feature)
    reasons = attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False, **features)
    if reasons:  # a backend that cannot apply it (dense's sdpa cannot softcap) says so, naming the feature
        assert any(FEATURE_NAME[feature] in r for r in reasons), reasons
        pytest.skip("declared unsupported: " + "; ".join(reasons))
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask, **features)
    ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern, **features)
    without = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
    assert _rel_l2(without, ref) > 0.05, "the feature must change the answer here, or the check could not fail"
    assert out.shape == q.shape
    assert _rel_l2(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("feature", FEATURE_NAME)
def test_variants_claiming_a_feature_have_the_references_gradients(name, backend, feature):
    """Causal with a query offset, padded, GQA; the sink logits are a model's parameters, so they get a gradient too."""
    attn = _build(name, backend)
    if not _claims(attn, feature):
        pytest.skip(f"{name} does not claim Capabilities.{feature}")
    q, k, v = _scaled_inputs(13, M // 2, H // 2, feature=feature, requires_grad=True)
    mask, features = _padding(True), _feature(feature)
    leaves = [q, k, v] + [t.requires_grad_() for t in features.values() if isinstance(t, torch.Tensor)]
    reasons = attn.not_supported_reasons(q, k, v, causal=True, kv_mask=mask, training=True, **features)
    if reasons:
        pytest.skip("declared unsupported: " + "; ".join(reasons))
    weight = torch.randn(q.shape, generator=torch.Generator().manual_seed(14))
    (attn(q, k, v, causal=True, kv_mask=mask, **features) * weight).sum().backward()
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    features64 = {key: (leaves64[3] if isinstance(value, torch.Tensor) else value) for key, value in features.items()}
    ref = reference_attention(*leaves64[:3], causal=True, kv_mask=mask, pattern=attn.pattern, **features64)
    (ref * weight.double()).sum().backward()
    for label, t, t64 in zip(("q", "k", "v", "sink_logits"), leaves, leaves64):
        assert _rel_l2(t.grad, t64.grad) < 1e-4, f"gradient of {label} disagrees with the float64 reference"


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("feature", FEATURE_NAME)
def test_unclaimed_features_are_refused_naming_them(name, backend, feature):
    attn = _build(name, backend)
    if _claims(attn, feature):
        pytest.skip(f"{name} claims Capabilities.{feature}")
    q, k, v = _scaled_inputs(15, M, H)
    features = _feature(feature)
    reasons = attn.not_supported_reasons(q, k, v, training=False, **features)
    assert any(f"does not support {FEATURE_NAME[feature]}" in r for r in reasons), reasons
    with pytest.raises(NotSupportedError, match=f"does not support {FEATURE_NAME[feature]}"), torch.no_grad():
        attn(q, k, v, **features)


class PlainPlugin(AttentionVariant):
    """A plugin written from README: its forward knows causal and kv_mask only, and declares no model feature."""

    capabilities = Capabilities(exact=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


class CappingPlugin(PlainPlugin):
    """A plugin that declares softcapping and takes it as a call argument."""

    capabilities = Capabilities(exact=True, softcap=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None, softcap=None):
        return reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, softcap=softcap, dtype=None)


def test_a_plugin_without_the_flags_is_refused_with_each_reason_and_never_handed_the_feature():
    q, k, v = _scaled_inputs(16, M, H)
    reasons = PlainPlugin().not_supported_reasons(q, k, v, softcap=SOFTCAP, sink_logits=_sink_logits())
    assert reasons == [
        "does not support logit softcapping (softcap=5.0); Capabilities.softcap is False",
        "does not support learned sink logits (sink_logits, one per query head: gpt-oss's s_aux); "
        "Capabilities.sink_logits is False",
    ]
    assert PlainPlugin()(q, k, v).shape == q.shape  # no feature given: forward is called as it always was
    assert _rel_l2(CappingPlugin()(q, k, v, softcap=SOFTCAP), reference_attention(q, k, v, softcap=SOFTCAP)) < 1e-6


def test_a_backend_that_cannot_apply_a_feature_is_refused_and_auto_takes_one_that_can():
    q, k, v = _scaled_inputs(17, M, H)
    with pytest.raises(NotSupportedError, match=r"backend 'sdpa' cannot apply logit softcapping \(softcap=5.0\); use "):
        _build("dense", "sdpa")(q, k, v, softcap=SOFTCAP)
    with pytest.raises(NotSupportedError, match=r"backend 'banded' cannot apply learned sink logits .* use 'masked'"):
        _build("sliding_window", "banded")(q, k, v, sink_logits=_sink_logits())
    auto = _build("dense", None)(q, k, v, softcap=SOFTCAP)
    assert _rel_l2(auto, reference_attention(q, k, v, softcap=SOFTCAP)) < TOLERANCE[torch.float32]


@pytest.mark.parametrize(
    "features,error,match",
    [
        ({"softcap": 0.0}, ValueError, r"softcap must be finite and > 0 .* got 0.0"),
        ({"softcap": float("inf")}, ValueError, r"softcap must be finite and > 0"),
        ({"softcap": True}, TypeError, r"softcap must be a positive number or None, got True \(bool\)"),
        (
            {"sink_logits": torch.zeros(H + 1)},
            ValueError,
            rf"sink_logits must have shape \(H,\) = \({H},\).*got \(5,\)",
        ),
        ({"sink_logits": torch.zeros(H, dtype=torch.long)}, TypeError, r"sink_logits must be a floating-point tensor"),
    ],
)
def test_bad_feature_values_are_refused_naming_the_argument(features, error, match):
    q, k, v = _scaled_inputs(18, M, H)
    with pytest.raises(error, match=match):
        _build("dense", None)(q, k, v, **features)
    with pytest.raises(error, match=match):
        reference_attention(q, k, v, **features)


def test_sink_logits_are_the_softmax_with_one_more_zero_valued_key():
    """The definition, independently of the reference's code: a key whose score is the head's sink logit and whose
    value is zero; and a row that sees no key gives zeros (all its weight on the sink)."""
    q, k, v = (t.double() for t in _scaled_inputs(19, 5, H, feature="sink_logits"))
    sinks = _sink_logits().double()
    scores = torch.einsum("bhnd,bhmd->bhnm", q, k) / q.shape[-1] ** 0.5
    with_sink = torch.cat([scores, sinks.view(1, H, 1, 1).expand(B, H, 5, 1)], dim=-1).softmax(-1)
    expected = torch.einsum("bhnm,bhmd->bhnd", with_sink[..., :-1], v)
    torch.testing.assert_close(reference_attention(q, k, v, sink_logits=sinks), expected)
    nothing = torch.zeros(B, M, dtype=torch.bool)
    assert reference_attention(q, k, v, kv_mask=nothing, sink_logits=sinks).abs().max() == 0
