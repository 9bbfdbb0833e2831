"""The variant contract, checked for every registered variant and every backend it has.

Parametrized over list_variants() at collection time, so a plugin (ATTNSUITE_PLUGINS,
--variant-plugin, an entry point) is covered with no test code of its own.
"""

from __future__ import annotations

import re

import pytest
import torch

from variants import (
    AttentionVariant,
    Capabilities,
    NotSupportedError,
    build_variant,
    get_variant,
    list_variants,
    reference_attention,
)

B, H, N, D = 2, 2, 37, 16  # N is deliberately not a power of two: ragged last blocks/chunks
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}  # relative L2 vs float64
BF16_ROUNDINGS = 3.0  # bf16 exact variants: relative L2 vs float64 <= this x one bf16 rounding of the answer

# The rules a plugin author can break, each with its one-line fix: the failure message of the check that catches it.
SHAPE_RULE = "the output must have q's shape (B, H, N, D); fix: return softmax(q @ k^T * scale) @ v with heads unmerged"
DTYPE_RULE = "the output must be in q's dtype and on q's device; fix: end forward with `.to(q.dtype)`"
FINITE_RULE = (
    "finite inputs must give a finite output; fix: compute the softmax in float32 (torch.softmax subtracts the row max)"
)
EXACT_RULE = (
    "a variant declaring Capabilities(exact=True) must match float64 softmax attention (under its own pattern); fix "
    "the math, or declare exact=False with `approximates`"
)
CAUSAL_RULE = (
    "with causal=True query i must see only keys j <= i + (M - N): changing later positions changed earlier outputs; "
    "fix: scores.masked_fill(~torch.ones(N, M, dtype=torch.bool).tril(M - N), float('-inf')) before the softmax"
)
PADDING_RULE = (
    "keys where kv_mask is False must not change any real query row's output; "
    "fix: scores.masked_fill(~kv_mask[:, None, None, :], float('-inf')) before the softmax"
)
NO_KEY_RULE = (
    "a query row that sees no key (every key padded or outside its pattern) must give zeros, not the NaN of a softmax "
    "over nothing; fix: torch.softmax(scores, -1).nan_to_num() before @ v (or out.masked_fill(~seen[..., None], 0))"
)
GQA_RULE = (
    "with H_kv < H (GQA) query head h must read K/V head h // (H // H_kv); fix: k.repeat_interleave(H // H_kv, dim=1) "
    "(and v) or SDPA's enable_gqa=True, or declare Capabilities(gqa=False) to refuse such calls"
)


def _with_rule(rule: str):
    """A torch.testing.assert_close msg: the rule and its fix before torch's own mismatch report."""
    return lambda report: f"{rule}\n{report}"


def _cases(device: str = "cpu") -> list:
    """(variant, backend) pairs; backend None for single-implementation variants."""
    cases = []
    for name in list_variants():
        spec = get_variant(name)
        marks = [pytest.mark.cuda] if device == "cuda" else []
        for backend in spec.backends or (None,):
            label = name if backend is None else f"{name}[{backend}]"
            cases.append(pytest.param(name, backend, id=label, marks=marks))
    return cases


def _build(name: str, backend: str | None, seed: int = 0):
    """The variant under its small_config (a window or chunk below N, so tiny inputs exercise it)."""
    torch.manual_seed(seed)
    config = dict(get_variant(name).cls.small_config)
    if backend is not None:
        config["backend"] = backend
    return build_variant(name, **config)


def _inputs(seed: int, *, n: int = N, m: int | None = None, dtype=torch.float32, device="cpu", requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    q = torch.randn(B, H, n, D, generator=g)
    k = torch.randn(B, H, m, D, generator=g)
    v = torch.randn(B, H, m, D, generator=g)
    return [t.to(device=device, dtype=dtype).requires_grad_(requires_grad) for t in (q, k, v)]


def _padding_mask(m: int = N, device="cpu") -> torch.Tensor:
    """Batch 0: right padding (a third of the keys); batch 1: a scattered mask."""
    mask = torch.ones(B, m, dtype=torch.bool)
    mask[0, m - m // 3 :] = False
    mask[1, torch.randperm(m, generator=torch.Generator().manual_seed(1))[: m // 4]] = False
    return mask.to(device)


def _runnable_or_skip(attn, q, k, v, **kwargs) -> None:
    reasons = attn.not_supported_reasons(q, k, v, **kwargs)
    if reasons:
        pytest.skip("declared unsupported: " + "; ".join(reasons))


def _assert_padded_keys_change_nothing(attn, q, k, v, mask) -> None:
    """Large random keys and values at the padded positions leave every real row's output as it was."""
    k2, v2 = k.clone(), v.clone()
    pad = ~mask[:, None, :, None].expand_as(k)
    k2[pad] = torch.randn(int(pad.sum())) * 10
    v2[pad] = torch.randn(int(pad.sum())) * 10
    with torch.no_grad():
        before = attn(q, k, v, kv_mask=mask)
        after = attn(q, k2, v2, kv_mask=mask)
    real = mask[:, None, :, None].expand_as(before)
    torch.testing.assert_close(after[real], before[real], rtol=1e-5, atol=1e-5, msg=_with_rule(PADDING_RULE))


def _rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_shape_dtype_finite(name, backend, dtype, causal):
    attn = _build(name, backend).to(dtype)
    q, k, v = _inputs(0, dtype=dtype)
    _runnable_or_skip(attn, q, k, v, causal=causal, training=False)
    with torch.no_grad():
        out = attn(q, k, v, causal=causal)
    assert out.shape == q.shape, f"{SHAPE_RULE} (got {tuple(out.shape)} for q {tuple(q.shape)})"
    assert out.dtype == dtype, f"{DTYPE_RULE} (got {out.dtype} for q in {dtype})"
    assert out.device == q.device, f"{DTYPE_RULE} (got {out.device} for q on {q.device})"
    assert torch.isfinite(out).all(), FINITE_RULE
    if dtype == torch.bfloat16 and attn.capabilities.exact:
        # Half precision must be accurate, not only finite. The floor is the float64 answer from the
        # same bf16 inputs rounded once to bf16 (~1.6e-3 relative L2). An exact variant may round
        # at most a few more times on the way: P to bf16 before P @ V adds about one floor, bf16
        # scores add ~u*|s| ~ one more, and the three add in quadrature (measured: chunked 1.0x,
        # sdpa/banded/flex/masked 1.2x, dense[reference] 2.1x the floor). 3x allows that; chunked
        # with bf16 running sums lands at 3.2x here (2.3x causal) and grows with N; test_chunked
        # holds chunked itself to 1.25x.
        ref = reference_attention(q, k, v, causal=causal, pattern=attn.pattern)
        assert _rel_l2(out, ref) <= BF16_ROUNDINGS * _rel_l2(ref.to(dtype), ref), f"{EXACT_RULE} (in bfloat16)"


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_exact_variants_match_float64_reference(name, backend, causal, padded):
    attn = _build(name, backend)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate: {attn.capabilities.approximates or 'no exactness claim'}")
    q, k, v = _inputs(1)
    mask = _padding_mask() if padded else None
    _runnable_or_skip(attn, q, k, v, causal=causal, kv_mask=mask, training=False)
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask)
    ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
    rows = slice(None) if mask is None else mask[:, None, :, None].expand_as(out)  # score only real query rows
    assert _rel_l2(out[rows], ref[rows]) < TOLERANCE[torch.float32], EXACT_RULE


@pytest.mark.parametrize("name,backend", _cases())
def test_exact_variants_cross_attention_lengths(name, backend):
    """N queries over M != N keys (non-causal): the contract allows it."""
    attn = _build(name, backend)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate")
    q, k, v = _inputs(2, n=19, m=N)
    _runnable_or_skip(attn, q, k, v, training=False)
    with torch.no_grad():
        out = attn(q, k, v)
    ref = reference_attention(q, k, v, pattern=attn.pattern)
    assert out.shape == q.shape, f"{SHAPE_RULE} (got {tuple(out.shape)} for q {tuple(q.shape)}, M={k.shape[2]} keys)"
    assert _rel_l2(out, ref) < TOLERANCE[torch.float32], f"{EXACT_RULE} (N=19 queries, M={N} keys)"


def _assert_no_leak_from_the_future(attn, q, k, v) -> None:
    """Queries, keys and values after position N // 2 replaced: under causal=True no output up to it changes."""
    cut = q.shape[2] // 2
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for t in (q2, k2, v2):
        t[:, :, cut + 1 :] = torch.randn_like(t[:, :, cut + 1 :]) * 5
    with torch.no_grad():
        before = attn(q, k, v, causal=True)[:, :, : cut + 1]
        after = attn(q2, k2, v2, causal=True)[:, :, : cut + 1]
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5, msg=_with_rule(CAUSAL_RULE))


@pytest.mark.parametrize("name,backend", _cases())
def test_causal_leaks_nothing_from_the_future(name, backend):
    attn = _build(name, backend)
    q, k, v = _inputs(3)
    _runnable_or_skip(attn, q, k, v, causal=True, training=False)
    _assert_no_leak_from_the_future(attn, q, k, v)


@pytest.mark.parametrize("name,backend", _cases())
def test_masked_keys_change_nothing(name, backend):
    attn = _build(name, backend)
    q, k, v = _inputs(4)
    mask = _padding_mask()
    _runnable_or_skip(attn, q, k, v, kv_mask=mask, training=False)
    _assert_padded_keys_change_nothing(attn, q, k, v, mask)


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_query_that_sees_no_key_gets_zeros(name, backend, causal):
    """As the reference does: zeros, not the NaN of a softmax over nothing (batch 1 is all padding)."""
    attn = _build(name, backend)
    q, k, v = _inputs(8)
    mask = _padding_mask()
    mask[1] = False
    _runnable_or_skip(attn, q, k, v, causal=causal, kv_mask=mask, training=False)
    _assert_unseeing_rows_are_zeros(attn, q, k, v, causal=causal, kv_mask=mask)


def _assert_unseeing_rows_are_zeros(attn, q, k, v, *, causal: bool, kv_mask: torch.Tensor) -> None:
    """Every output of batch 1, whose keys are all padded, is zero; nothing anywhere is NaN."""
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=kv_mask)
    assert torch.isfinite(out).all(), f"{NO_KEY_RULE} (got {int((~torch.isfinite(out)).sum())} non-finite outputs)"
    assert torch.count_nonzero(out[1]) == 0, f"{NO_KEY_RULE} (got {int(torch.count_nonzero(out[1]))} nonzero outputs)"


class _PlainSoftmax(AttentionVariant):
    """What a newcomer writes first: README's plugin without `.nan_to_num()`; `ignore` drops "causal" or "kv_mask"."""

    capabilities = Capabilities(exact=True)

    def __init__(self, ignore: str = "") -> None:
        super().__init__()
        self.ignore = ignore

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, N, M)
        if kv_mask is not None and self.ignore != "kv_mask":
            scores = scores.masked_fill(~kv_mask[:, None, None, :], float("-inf"))
        if causal and self.ignore != "causal":
            seen = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(k.shape[2] - q.shape[2])
            scores = scores.masked_fill(~seen, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def test_a_plain_softmax_plugin_is_told_the_no_key_rule_and_its_fix():
    q, k, v = _inputs(8)
    mask = _padding_mask()
    mask[1] = False
    with pytest.raises(AssertionError, match=re.escape(NO_KEY_RULE)):
        _assert_unseeing_rows_are_zeros(_PlainSoftmax(), q, k, v, causal=False, kv_mask=mask)


@pytest.mark.parametrize(
    "ignore,check,rule",
    [
        ("causal", lambda attn, q, k, v: _assert_no_leak_from_the_future(attn, q, k, v), CAUSAL_RULE),
        (
            "kv_mask",
            lambda attn, q, k, v: _assert_padded_keys_change_nothing(attn, q, k, v, _padding_mask()),
            PADDING_RULE,
        ),
    ],
)
def test_a_plugin_that_leaks_is_told_the_rule_and_its_fix(ignore, check, rule):
    q, k, v = _inputs(3)
    check(_PlainSoftmax(), q, k, v)  # the check passes the plugin that keeps the rule
    with pytest.raises(AssertionError, match=re.escape(rule)):
        check(_PlainSoftmax(ignore=ignore), q, k, v)


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_reach_inputs_and_parameters(name, backend, causal):
    attn = _build(name, backend)
    q, k, v = _inputs(5, requires_grad=True)
    _runnable_or_skip(attn, q, k, v, causal=causal, training=True)
    out = attn(q, k, v, causal=causal)
    weight = torch.randn_like(out)
    (out * weight).sum().backward()
    for label, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and torch.isfinite(t.grad).all(), f"no finite gradient for {label}"
        assert t.grad.abs().sum() > 0, f"gradient for {label} is all zero"
    for pname, p in attn.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"no finite gradient for parameter {pname}"
    if attn.capabilities.exact:
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = reference_attention(q64, k64, v64, causal=causal, pattern=attn.pattern)
        (ref * weight.double()).sum().backward()
        for label, t, t64 in (("q", q, q64), ("k", k, k64), ("v", v, v64)):
            assert _rel_l2(t.grad, t64.grad) < 1e-4, f"gradient of {label} disagrees with the float64 reference"


@pytest.mark.parametrize("name,backend", _cases())
def test_causal_gradients_under_the_harness_left_padding_are_finite_and_exact(name, backend):
    """The sweep pads on the left (harness.inputs.padding), so under causal the first query rows see no key at all: the
    backward through them must still work and give finite gradients, the reference's on real rows for an exact variant
    (upstream gradients on padded query rows are zero: those rows are unspecified)."""
    from harness.inputs.padding import padding_mask

    attn = _build(name, backend)
    q, k, v = _inputs(9, requires_grad=True)
    mask = padding_mask(B, N, 0.3, seed=0)
    assert not bool(mask[:, 0].all())  # some row starts with padding: its first queries see nothing
    _runnable_or_skip(attn, q, k, v, causal=True, kv_mask=mask, training=True)
    weight = torch.randn(q.shape[:3] + (v.shape[-1],), generator=torch.Generator().manual_seed(2))
    weight = weight * mask[:, None, :, None]  # no gradient from padded query rows
    (attn(q, k, v, causal=True, kv_mask=mask) * weight).sum().backward()
    for label, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and torch.isfinite(t.grad).all(), f"no finite gradient for {label}"
    if attn.capabilities.exact:
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = reference_attention(q64, k64, v64, causal=True, kv_mask=mask, pattern=attn.pattern)
        (ref * weight.double()).sum().backward()
        for label, t, t64 in (("q", q, q64), ("k", k, k64), ("v", v, v64)):
            assert _rel_l2(t.grad, t64.grad) < 1e-4, f"gradient of {label} disagrees with the float64 reference"


def _unsupported_cases() -> list:
    """(variant, backend, request) triples whose refusal is declared on this CPU machine."""
    cases = []
    q, k, v = _inputs(0)
    requests = {
        "causal": dict(causal=True, training=False),
        "kv_mask": dict(kv_mask=_padding_mask(), training=False),
        "training": dict(training=True),
    }
    for param in _cases():
        name, backend = param.values
        attn = _build(name, backend)
        for label, request in requests.items():
            if attn.not_supported_reasons(q, k, v, **request):
                cases.append(pytest.param(name, backend, label, id=f"{param.id}-{label}"))
    return cases


@pytest.mark.parametrize("name,backend,request_kind", _unsupported_cases())
def test_declared_unsupported_raises_with_its_reasons(name, backend, request_kind):
    attn = _build(name, backend)
    q, k, v = _inputs(6, requires_grad=request_kind == "training")
    kwargs = {"causal": {"causal": True}, "kv_mask": {"kv_mask": _padding_mask()}, "training": {}}[request_kind]
    reasons = attn.not_supported_reasons(q, k, v, **kwargs)
    assert reasons
    with pytest.raises(NotSupportedError) as info:
        out = attn(q, k, v, **kwargs)
        out.sum().backward()
    for reason in reasons:
        assert reason in str(info.value)


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("training", [False, True], ids=["forward", "train"])
def test_a_prepared_call_is_the_checked_call_without_the_checks(monkeypatch, name, backend, training):
    """prepare_call checks once and returns a call that gives what variant(q, k, v) gives, checking nothing itself."""
    import variants.base as base

    attn = _build(name, backend)
    q, k, v = _inputs(7, requires_grad=training)
    mask = _padding_mask() if attn.capabilities.kv_mask else None
    _runnable_or_skip(attn, q, k, v, kv_mask=mask, training=training)
    with torch.set_grad_enabled(training):
        expected = attn(q, k, v, kv_mask=mask)
        call = attn.prepare_call(q, k, v, kv_mask=mask, training=training)

        def checked(*args, **kwargs):
            raise AssertionError("a prepared call checked its inputs again")

        monkeypatch.setattr(base, "check_qkv", checked)
        monkeypatch.setattr(type(attn), "not_supported_reasons", checked)
        out = call(q, k, v)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    if training:
        out.sum().backward()
        assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("name,backend,request_kind", _unsupported_cases())
def test_a_refused_call_is_refused_when_prepared(name, backend, request_kind):
    attn = _build(name, backend)
    q, k, v = _inputs(6, requires_grad=request_kind == "training")
    kwargs = {"causal": {"causal": True}, "kv_mask": {"kv_mask": _padding_mask()}, "training": {}}[request_kind]
    reasons = attn.not_supported_reasons(q, k, v, **kwargs)
    with pytest.raises(NotSupportedError) as info:
        attn.prepare_call(q, k, v, **kwargs)
    assert info.value.reasons == reasons


@pytest.mark.parametrize("name,backend", _cases())
def test_flops_are_positive_and_grow_with_length(name, backend):
    attn = _build(name, backend)
    small = attn.flops(1, 1, 1024, 1024, 64, False)
    large = attn.flops(1, 1, 2048, 2048, 64, False)
    assert isinstance(small, int) and small > 0
    assert large > small
    assert attn.flops(1, 1, 1024, 1024, 64, True) <= small


@pytest.mark.parametrize("name,backend", _cases("cuda"))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_matches_reference(name, backend, dtype):
    attn = _build(name, backend).to("cuda", dtype)
    q, k, v = _inputs(7, n=256, dtype=dtype, device="cuda")
    checked, refused = 0, []
    for mask in (None, _padding_mask(256, device="cuda")):
        for causal in (False, True):
            reasons = attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False)
            if reasons:
                refused += reasons
                continue
            with torch.no_grad():
                out = attn(q, k, v, causal=causal, kv_mask=mask)
            rows = torch.ones_like(out, dtype=torch.bool) if mask is None else mask[:, None, :, None].expand_as(out)
            assert torch.isfinite(out[rows]).all()
            if attn.capabilities.exact:
                ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
                assert _rel_l2(out[rows], ref[rows]) < 5 * TOLERANCE[dtype], (
                    f"causal={causal}, padded={mask is not None}"
                )
            checked += 1
    if not checked:  # every combination refused: say so instead of passing with nothing checked
        pytest.skip("declared unsupported: " + "; ".join(dict.fromkeys(refused)))


# ---- grouped-query attention: k, v with H_kv heads dividing H --------------------------------
GQA_H = 8  # query heads in the GQA tests, so H_kv = H, H/4 and 1 are all integers
KV_HEADS = [GQA_H, GQA_H // 4, 1]


def _gqa_inputs(seed: int, kv_heads: int, *, n: int = N, m: int | None = None, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    q = torch.randn(B, GQA_H, n, D, generator=g)
    k = torch.randn(B, kv_heads, m, D, generator=g)
    v = torch.randn(B, kv_heads, m, D, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _gqa_build(name: str, backend: str | None, kv_heads: int, seed: int = 0):
    """As _build, with a per-head config field (linformer's share='none') sized for H_kv heads."""
    attn = _build(name, backend, seed)
    if "heads" in attn.config.to_dict() and getattr(attn.config, "share", None) == "none":
        torch.manual_seed(seed)
        attn = build_variant(name, **{**get_variant(name).cls.small_config, "heads": kv_heads})
    return attn


def _gqa_or_skip(attn, kv_heads: int) -> None:
    if kv_heads != GQA_H and not attn.capabilities.gqa:
        pytest.skip(f"{attn.name} declares no grouped-query attention (Capabilities.gqa=False)")


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=lambda h: f"kv{h}")
def test_gqa_exact_variants_match_float64_reference(name, backend, kv_heads):
    attn = _gqa_build(name, backend, kv_heads)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate: checked for shape, causality and padding below")
    _gqa_or_skip(attn, kv_heads)
    q, k, v = _gqa_inputs(11, kv_heads)
    checked = 0
    for causal in (False, True):
        for mask in (None, _padding_mask()):
            if attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False):
                continue
            with torch.no_grad():
                out = attn(q, k, v, causal=causal, kv_mask=mask)
            ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
            rows = slice(None) if mask is None else mask[:, None, :, None].expand_as(out)
            assert out.shape == q.shape, f"{SHAPE_RULE} (got {tuple(out.shape)} for q {tuple(q.shape)})"
            assert _rel_l2(out[rows], ref[rows]) < TOLERANCE[torch.float32], (
                f"{GQA_RULE if kv_heads < GQA_H else EXACT_RULE} "
                f"(H={GQA_H}, H_kv={kv_heads}, causal={causal}, padded={mask is not None})"
            )
            checked += 1
    if not checked:
        pytest.skip("declared unsupported: " + "; ".join(attn.not_supported_reasons(q, k, v, training=False)))


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("kv_heads", KV_HEADS[1:], ids=lambda h: f"kv{h}")
def test_gqa_shape_causality_and_padding(name, backend, kv_heads):
    """Every variant, approximate ones included: the output shape, no leak from the future, masked keys inert."""
    attn = _gqa_build(name, backend, kv_heads)
    _gqa_or_skip(attn, kv_heads)
    q, k, v = _gqa_inputs(12, kv_heads)
    _runnable_or_skip(attn, q, k, v, training=False)
    with torch.no_grad():
        out = attn(q, k, v)
    assert out.shape == q.shape, f"{GQA_RULE}; {SHAPE_RULE} (got {tuple(out.shape)} for q {tuple(q.shape)})"
    assert out.dtype == q.dtype, f"{DTYPE_RULE} (got {out.dtype} for q in {q.dtype})"
    assert torch.isfinite(out).all(), f"{GQA_RULE}; {FINITE_RULE}"
    if not attn.not_supported_reasons(q, k, v, causal=True, training=False):
        _assert_no_leak_from_the_future(attn, q, k, v)
    mask = _padding_mask()
    if not attn.not_supported_reasons(q, k, v, kv_mask=mask, training=False):
        _assert_padded_keys_change_nothing(attn, q, k, v, mask)


@pytest.mark.parametrize("name,backend", _cases())
def test_gqa_gradients_match_float64_reference(name, backend):
    attn = _gqa_build(name, backend, GQA_H // 4)
    if not attn.capabilities.exact:
        pytest.skip(f"{name} is approximate")
    _gqa_or_skip(attn, GQA_H // 4)
    q, k, v = _gqa_inputs(13, GQA_H // 4, requires_grad=True)
    _runnable_or_skip(attn, q, k, v, causal=True, training=True)
    out = attn(q, k, v, causal=True)
    weight = torch.randn_like(out)
    (out * weight).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    (reference_attention(q64, k64, v64, causal=True, pattern=attn.pattern) * weight.double()).sum().backward()
    for label, t, t64 in (("q", q, q64), ("k", k, k64), ("v", v, v64)):
        assert _rel_l2(t.grad, t64.grad) < 1e-4, f"gradient of {label} disagrees with the float64 reference"


def test_a_variant_without_gqa_is_refused_with_its_reason():
    class HeadsMustMatch(AttentionVariant):
        capabilities = Capabilities(gqa=False)

        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, dtype=None)

    attn = HeadsMustMatch()
    q, k, v = _gqa_inputs(14, 2)
    reason = r"does not support grouped-query attention \(H=8 query heads, H_kv=2 K/V heads"
    assert any("grouped-query" in r for r in attn.not_supported_reasons(q, k, v))
    with pytest.raises(NotSupportedError, match=reason + r".*repeat_interleave\(4, dim=1\)"):
        attn(q, k, v)
    assert attn(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)).shape == q.shape  # H_kv = H still runs


# ---- attention sinks (sliding_window) ---------------------------------------------------------
@pytest.mark.parametrize("backend", get_variant("sliding_window").backends)
@pytest.mark.parametrize("sinks", [1, 3, N + 5], ids=lambda s: f"sinks{s}")
@pytest.mark.parametrize("kv_heads", [GQA_H, 1], ids=lambda h: f"kv{h}")
def test_sliding_window_sinks_match_float64_reference(backend, sinks, kv_heads):
    attn = build_variant("sliding_window", window=5, sinks=sinks, backend=backend)
    q, k, v = _gqa_inputs(15, kv_heads)
    checked = 0
    for causal in (False, True):
        for mask in (None, _padding_mask()):
            if attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False):
                continue
            with torch.no_grad():
                out = attn(q, k, v, causal=causal, kv_mask=mask)
            ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
            rows = slice(None) if mask is None else mask[:, None, :, None].expand_as(out)
            assert _rel_l2(out[rows], ref[rows]) < TOLERANCE[torch.float32], (
                f"causal={causal}, padded={mask is not None}"
            )
            checked += 1
    if not checked:
        pytest.skip("declared unsupported: " + "; ".join(attn.not_supported_reasons(q, k, v, training=False)))


def test_sinks_are_in_the_pattern_the_reference_checks():
    """window=2, sinks=2, query 6 of 8: keys 0, 1 (sinks) and 5, 6 (causal band); non-causal adds key 7."""
    from variants.reference import visibility

    attn = build_variant("sliding_window", window=2, sinks=2)
    for causal, want in ((True, [1, 1, 0, 0, 0, 1, 1, 0]), (False, [1, 1, 0, 0, 0, 1, 1, 1])):
        seen = visibility(torch.tensor([6]), 8, causal=causal, pattern=attn.pattern)[0, 0, 0].int().tolist()
        assert seen == want
    # Causality still applies to sinks: query 0 sees key 0 only.
    assert visibility(torch.tensor([0]), 8, causal=True, pattern=attn.pattern)[0, 0, 0].int().tolist() == [1] + [0] * 7


def test_xformers_refuses_sinks_with_a_reason():
    attn = build_variant("sliding_window", window=4, sinks=2, backend="xformers")
    q, k, v = _inputs(16)
    assert any("no attention sinks" in r for r in attn.not_supported_reasons(q, k, v, causal=True))
    with pytest.raises(
        NotSupportedError, match=r"\(xformers\) has no attention sinks .* got sinks=2; use backend 'banded'"
    ):
        attn(q, k, v, causal=True)


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (dict(sinks=-1), ValueError, r"sinks must be >= 0, got -1"),
        (dict(sinks=1.5), TypeError, r"sinks must be an integer, got 1.5"),
    ],
)
def test_bad_sinks_are_refused(fields, error, match):
    with pytest.raises(error, match=match):
        build_variant("sliding_window", **fields)


# ---- decoding: init_state over a context, then one token per step ------------------------------
CONTEXT, STEPS = 13, 6  # context length, then decoded tokens (the window of small_config is 8: the ring wraps)


def _decode_all(attn, q, k, v, kv_mask=None):
    """init_state over the first CONTEXT tokens, then step through the rest: (B, H, STEPS, D)."""
    with torch.no_grad():
        state = attn.init_state(
            k[:, :, :CONTEXT], v[:, :, :CONTEXT], kv_mask=None if kv_mask is None else kv_mask[:, :CONTEXT]
        )
        outs = []
        for t in range(CONTEXT, CONTEXT + STEPS):
            out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
            assert out.shape == (B, q.shape[1], 1, D) and out.dtype == q.dtype
            outs.append(out)
    return torch.cat(outs, dim=2), state


def _decode_mask() -> torch.Tensor:
    """Context padding (right-padded batch 0, a hole in batch 1); decoded tokens are always real."""
    mask = torch.ones(B, CONTEXT + STEPS, dtype=torch.bool)
    mask[0, CONTEXT - 4 : CONTEXT] = False
    mask[1, 2] = False
    return mask


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=lambda h: f"kv{h}")
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_decode_steps_equal_rows_of_full_causal_attention(name, backend, kv_heads, padded):
    attn = _gqa_build(name, backend, kv_heads)
    q, k, v = _gqa_inputs(21, kv_heads, n=CONTEXT + STEPS)
    mask = _decode_mask() if padded else None
    reasons = attn.decode_reasons(q[:, :, :1], k, v, kv_mask=mask)
    if reasons:
        pytest.skip("declares no decoding: " + "; ".join(reasons))
    got, _ = _decode_all(attn, q, k, v, mask)
    decoded = slice(CONTEXT, CONTEXT + STEPS)
    if attn.capabilities.exact:
        ref = reference_attention(q, k, v, causal=True, kv_mask=mask, pattern=attn.pattern)[:, :, decoded]
        assert _rel_l2(got, ref) < TOLERANCE[torch.float32]
    else:  # approximate: the same rows of its own causal forward
        with torch.no_grad():
            ref = attn(q, k, v, causal=True, kv_mask=mask)[:, :, decoded]
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def _no_decode_cases() -> list:
    """(variant, backend) pairs that declare they cannot decode on this machine."""
    q, k, v = _gqa_inputs(0, GQA_H)
    return [param for param in _cases() if _build(*param.values).decode_reasons(q[:, :, :1], k, v)]


@pytest.mark.parametrize("name,backend", _no_decode_cases())
def test_a_variant_that_cannot_decode_raises_with_its_reasons(name, backend):
    attn = _build(name, backend)
    q, k, v = _gqa_inputs(22, GQA_H)
    reasons = attn.decode_reasons(k, k, v) + attn.decode_reasons(q[:, :, :1], k[:, :, :1], v[:, :, :1])
    assert reasons and all(isinstance(r, str) and r for r in reasons)
    with pytest.raises(NotSupportedError) as info:
        state = attn.init_state(k, v)
        attn.step(q[:, :, :1], k[:, :, :1], v[:, :, :1], state)
    assert any(reason in str(info.value) for reason in reasons)


def test_linformer_says_why_it_cannot_decode():
    attn = build_variant("linformer", k=8, max_seq_len=64)
    q, k, v = _inputs(23)
    assert not get_variant("linformer").capabilities.decode
    with pytest.raises(NotSupportedError, match=r"linformer cannot decode: it is not causal"):
        attn.init_state(k, v)


def _state_bytes_at(name: str, n: int, steps: int = 0, **config) -> int:
    from variants import state_bytes

    attn = build_variant(name, **config)
    q, k, v = (torch.randn(1, 2, n + steps, 16) for _ in range(3))
    with torch.no_grad():
        state = attn.init_state(k[:, :, :n], v[:, :, :n])
        for t in range(n, n + steps):
            _, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
    assert attn.state_bytes(state) == state_bytes(state)
    return state_bytes(state)


@pytest.mark.parametrize("name", ["dense", "chunked"])
def test_kv_cache_state_grows_linearly_in_n(name):
    small, large = _state_bytes_at(name, 1024), _state_bytes_at(name, 4096)
    assert small == 2 * (1 * 2 * 2048 * 16 * 4)  # k and v, capacity 2N float32: the allocated bytes
    assert large == 4 * small
    # Appending fills preallocated room (no growth) until the capacity doubles.
    assert _state_bytes_at(name, 64, steps=64) == _state_bytes_at(name, 64)
    assert _state_bytes_at(name, 64, steps=65) == 2 * _state_bytes_at(name, 64)


@pytest.mark.parametrize(
    "name,config",
    [
        ("sliding_window", dict(window=64, sinks=4)),
        ("distilled", dict(features=16)),
        ("window_linear", dict(window=64)),
    ],
)
def test_bounded_state_is_constant_in_n(name, config):
    sizes = {n: _state_bytes_at(name, n, steps=3, **config) for n in (256, 1024, 4096)}
    assert len(set(sizes.values())) == 1, sizes
    assert sizes[4096] < _state_bytes_at("dense", 256)  # smaller than even a short KV cache


def test_state_bytes_counts_nested_tensors_and_shared_storage_once():
    from dataclasses import dataclass

    from variants import state_bytes

    @dataclass
    class Holder:
        a: torch.Tensor
        rest: tuple

    buf = torch.zeros(10, dtype=torch.float64)  # 80 bytes
    state = {"x": Holder(buf[:3], (buf[5:], torch.zeros(4, dtype=torch.int32), "label")), "n": 3}
    assert state_bytes(state) == 80 + 16


def _dense_state(kv_heads: int = 2, n: int = 5):
    attn = build_variant("dense")
    k, v = torch.randn(B, kv_heads, n, D), torch.randn(B, kv_heads, n, D)
    return attn, attn.init_state(k, v)


@pytest.mark.parametrize(
    "q_shape,kv_shape,error,match",
    [
        (
            (B, 4, 2, D),
            (B, 2, 1, D),
            ValueError,
            r"step: q_t must be one token, shape \(B, H, 1, D\), got \(2, 4, 2, 16\)",
        ),
        (
            (B, 4, 1, D),
            (B, 4, 1, D),
            ValueError,
            r"step: k_t must be \(B, H_kv, 1, D\) = \(2, 2, 1, 16\) to match the state, got \(2, 4, 1, 16\)",
        ),
        (
            (B, 4, 1, 8),
            (B, 2, 1, D),
            ValueError,
            r"step: q_t must be \(B=2, H, 1, D=16\) to match the state, got \(2, 4, 1, 8\)",
        ),
        ((B, 3, 1, D), (B, 2, 1, D), ValueError, r"H_kv=2 heads, which does not divide the H=3 query heads"),
    ],
)
def test_step_with_wrong_shapes_is_refused(q_shape, kv_shape, error, match):
    attn, state = _dense_state()
    with pytest.raises(error, match=match):
        attn.step(torch.randn(q_shape), torch.randn(kv_shape), torch.randn(kv_shape), state)


def test_step_with_another_variants_state_is_refused():
    attn, state = _dense_state()
    sliding = build_variant("sliding_window", window=4)
    with pytest.raises(
        TypeError,
        match=r"step: state must be the SlidingWindowState that sliding_window.init_state/step returned, got KVCache",
    ):
        sliding.step(torch.randn(B, 4, 1, D), torch.randn(B, 2, 1, D), torch.randn(B, 2, 1, D), state)


def test_init_state_checks_its_context():
    attn = build_variant("dense")
    k = torch.randn(B, 2, 5, D)
    with pytest.raises(
        ValueError, match=r"init_state: kv_mask must be a bool tensor of shape \(B, N\) = \(2, 5\), got \(2, 4\)"
    ):
        attn.init_state(k, k, kv_mask=torch.ones(B, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"init_state: k and v must have one shape, dtype and device"):
        attn.init_state(k, k[:, :1])


@pytest.mark.parametrize("sinks", [2, CONTEXT + 3], ids=["sinks2", "sinks_past_context"])
@pytest.mark.parametrize("kv_heads", [GQA_H, 1], ids=lambda h: f"kv{h}")
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_sliding_window_decode_keeps_its_sinks(sinks, kv_heads, padded):
    """The ring buffer wraps (window 4 < CONTEXT); sinks past the context are filled by decoded tokens."""
    attn = build_variant("sliding_window", window=4, sinks=sinks)
    q, k, v = _gqa_inputs(24, kv_heads, n=CONTEXT + STEPS)
    mask = _decode_mask() if padded else None
    got, state = _decode_all(attn, q, k, v, mask)
    ref = reference_attention(q, k, v, causal=True, kv_mask=mask, pattern=attn.pattern)[:, :, CONTEXT:]
    assert _rel_l2(got, ref) < TOLERANCE[torch.float32]
    assert state.k.shape[2] == sinks + 4  # the state holds sinks + window slots, whatever the length


@pytest.mark.parametrize("name,backend", _cases("cuda"))
@pytest.mark.parametrize("kv_heads", KV_HEADS[1:], ids=lambda h: f"kv{h}")
def test_cuda_gqa_matches_reference_and_decodes(name, backend, kv_heads):
    """GQA through the CUDA kernels (enable_gqa, flex, xformers' BMGHK layout) and a few decode steps."""
    attn = _gqa_build(name, backend, kv_heads).to("cuda", torch.bfloat16)
    _gqa_or_skip(attn, kv_heads)
    q, k, v = (t.to("cuda", torch.bfloat16) for t in _gqa_inputs(25, kv_heads, n=256))
    checked = 0
    for mask in (None, _padding_mask(256, device="cuda")):
        for causal in (False, True):
            if attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False):
                continue
            with torch.no_grad():
                out = attn(q, k, v, causal=causal, kv_mask=mask)
            rows = torch.ones_like(out, dtype=torch.bool) if mask is None else mask[:, None, :, None].expand_as(out)
            assert torch.isfinite(out[rows]).all()
            if attn.capabilities.exact:
                ref = reference_attention(q, k, v, causal=causal, kv_mask=mask, pattern=attn.pattern)
                assert _rel_l2(out[rows], ref[rows]) < 5 * TOLERANCE[torch.bfloat16], (
                    f"causal={causal}, padded={mask is not None}"
                )
            checked += 1
    if not attn.decode_reasons(q[:, :, :1], k, v):
        got, _ = _decode_all(attn, q, k, v)
        with torch.no_grad():
            want = (
                reference_attention(q, k, v, causal=True, pattern=attn.pattern)
                if attn.capabilities.exact
                else attn(q, k, v, causal=True)
            )[:, :, CONTEXT : CONTEXT + STEPS]
        assert _rel_l2(got, want) < 5 * TOLERANCE[torch.bfloat16]
        checked += 1
    if not checked:
        pytest.skip("declared unsupported: " + "; ".join(attn.not_supported_reasons(q, k, v, training=False)))
