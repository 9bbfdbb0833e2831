"""Linformer: its formula, its refusals with reasons, bad configs, linear cost, and calibration."""

from __future__ import annotations

import math

import pytest
import torch

from harness.inputs import make_inputs
from harness.measure.memory import measure_peak_memory
from variants import NotSupportedError, build_variant, reference_attention
from variants.calibrate import calibrate


def _qkv(seed: int, B: int = 2, H: int = 2, N: int = 48, D: int = 16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g) for _ in range(3)]


def _local(seed: int, N: int = 64):
    """Rotary-structured inputs (attention peaks near the diagonal), the sweep's "local" distribution."""
    return make_inputs("local", {"scale": 4.0}, B=2, H=2, N=N, D=16, seed=seed)


def test_uses_the_first_n_columns_of_e_and_f():
    torch.manual_seed(0)
    attn = build_variant("linformer", k=8, max_seq_len=64, share="none", heads=2)
    q, k, v = _qkv(0)  # N = 48 < max_seq_len = 64
    with torch.no_grad():
        out = attn(q, k, v)
        E = attn.E[:, :, :48].double() * attn.e_scale  # (H, k, N): stored at unit scale
        F = attn.F[:, :, :48].double() * attn.f_scale
        kp = torch.einsum("hkn,bhnd->bhkd", E, k.double())
        vp = torch.einsum("hkn,bhnd->bhkd", F, v.double())
    ref = reference_attention(q.double(), kp, vp)  # exact softmax over the k projected rows
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("share,n_params", [("none", 2 * 3 * 8 * 64), ("headwise", 2 * 8 * 64), ("kv", 8 * 64)])
def test_sharing_modes_hold_the_papers_parameter_counts(share, n_params):
    attn = build_variant("linformer", k=8, max_seq_len=64, share=share, heads=3)
    assert sum(p.numel() for p in attn.parameters()) == n_params


def test_causal_is_refused_with_its_reason():
    attn = build_variant("linformer", k=8, max_seq_len=64)
    q, k, v = _qkv(1)
    with pytest.raises(NotSupportedError, match="mixes all M keys, future ones included"):
        attn(q, k, v, causal=True)


def test_keys_longer_than_max_seq_len_are_refused_with_the_fix():
    attn = build_variant("linformer", k=8, max_seq_len=32)
    q, k, v = _qkv(2)  # N = M = 48
    assert any("M=48 exceeds max_seq_len=32" in r for r in attn.not_supported_reasons(q, k, v))
    with pytest.raises(NotSupportedError, match=r"build with max_seq_len >= 48"):
        attn(q, k, v)


def test_per_head_projections_refuse_another_head_count():
    attn = build_variant("linformer", k=8, max_seq_len=64, share="none", heads=4)
    q, k, v = _qkv(3, H=2)
    with pytest.raises(NotSupportedError, match=r"heads=4, got H=2"):
        attn(q, k, v)


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (dict(k=0), ValueError, r"k must be >= 1, got 0"),
        (dict(k=65, max_seq_len=64), ValueError, r"k must be <= max_seq_len .*max_seq_len=64.*got k=65"),
        (dict(k=2.5), TypeError, r"k must be an integer, got 2.5"),
        (dict(share="heads"), ValueError, r"share must be one of .*got 'heads'. Did you mean 'headwise'"),
        (dict(init="xavier"), ValueError, r"init must be one of 'scaled_random', 'paper', got 'xavier'"),
        (dict(max_seq_len=0, k=1), ValueError, r"max_seq_len must be >= 1, got 0"),
    ],
)
def test_bad_configs_name_the_field_and_value(fields, error, match):
    with pytest.raises(error, match=match):
        build_variant("linformer", **fields)


@pytest.mark.parametrize("init", ["scaled_random", "paper"])
def test_both_initialisations_give_finite_outputs(init):
    torch.manual_seed(0)
    attn = build_variant("linformer", k=8, max_seq_len=64, init=init)
    q, k, v = _qkv(4)
    with torch.no_grad():
        assert torch.isfinite(attn(q, k, v)).all()


def _effective_projections(attn) -> list[torch.Tensor]:
    """E and F as forward applies them (stored at unit scale, times the fixed scales)."""
    with torch.no_grad():
        out = [attn.E * attn.e_scale]
        if attn.F is not None:
            out.append(attn.F * attn.f_scale)
    return out


@pytest.mark.parametrize("share,heads", [("none", 2), ("headwise", 1), ("kv", 1)])
def test_each_initialisation_draws_the_distribution_it_promises(share, heads):
    """paper: fairseq's xavier_uniform, gain 1/sqrt(2), on each (k, L) head: U(-a, a), a = gain*sqrt(6/(k+L)),
    std a/sqrt(3). scaled_random: E ~ N(0, 1/L), F ~ N(0, 1/L^2). With k*L = 8192 draws per matrix the
    sample std is within 1% (normal) / 0.5% (uniform) of its value, so 4% is > 4 sigma."""
    K, L = 16, 512
    a = math.sqrt(6 / (K + L)) / math.sqrt(2)  # 0.0754; scaled_random's E has a similar std (1/sqrt(L) = 0.0442)
    torch.manual_seed(0)
    paper = _effective_projections(
        build_variant("linformer", k=K, max_seq_len=L, share=share, heads=heads, init="paper")
    )
    torch.manual_seed(0)
    scaled = _effective_projections(build_variant("linformer", k=K, max_seq_len=L, share=share, heads=heads))
    assert len(paper) == len(scaled) == (1 if share == "kv" else 2)
    for W in paper:
        assert W.shape == (heads, K, L)
        for head in W:  # every head drawn (share="none" initialises each one)
            assert float(head.abs().max()) <= a * (1 + 1e-6)
            assert float(head.abs().max()) > 0.99 * a  # 8192 uniform draws come within 1% of the bound
            assert float(head.std()) == pytest.approx(a / math.sqrt(3), rel=0.04)
        if heads > 1:
            assert not torch.equal(W[0], W[1])
    E, *F = scaled
    assert float(E.std()) == pytest.approx(L**-0.5, rel=0.04)
    assert float(E.abs().max()) > 1.5 * a  # a normal's tail: 8192 draws reach ~3.8 sigma = 0.17
    if F:
        assert float(F[0].std()) == pytest.approx(1 / L, rel=0.04)  # 22x below the paper's F


@pytest.mark.parametrize("share", ["headwise", "kv"])
def test_shared_projections_follow_the_formula(share):
    """headwise: one E and one F for every head; kv: F is E (values projected exactly like keys)."""
    torch.manual_seed(0)
    attn = build_variant("linformer", k=8, max_seq_len=64, share=share)
    q, k, v = _qkv(6)  # H = 2 heads, N = M = 48
    with torch.no_grad():
        out = attn(q, k, v)
        E = attn.E[0, :, :48].double() * attn.e_scale  # (k, M), the same for both heads
        F = E if share == "kv" else attn.F[0, :, :48].double() / 64  # F's scale is 1/max_seq_len
        kp = torch.einsum("kn,bhnd->bhkd", E, k.double())
        vp = torch.einsum("kn,bhnd->bhkd", F, v.double())
    assert (attn.F is None) == (share == "kv")
    torch.testing.assert_close(out.double(), reference_attention(q.double(), kp, vp), rtol=1e-5, atol=1e-5)


def test_flops_grow_linearly_in_length():
    attn = build_variant("linformer", k=64, max_seq_len=32768)
    f = [attn.flops(1, 4, n, n, 64, False) for n in (4096, 8192, 16384)]
    assert f[1] == 2 * f[0] and f[2] == 2 * f[1]
    assert f[0] == 4 * 4 * 64 * 64 * (4096 + 4096)  # 4*B*H*k*D*(N + M): projections + attention over k rows


def test_peak_memory_grows_linearly_in_length():
    attn = build_variant("linformer", k=16, max_seq_len=8192)
    peaks = []
    for n in (2048, 4096, 8192):
        q, k, v = _qkv(5, B=1, H=2, N=n, D=16)
        with torch.no_grad():
            peaks.append(measure_peak_memory(lambda: attn(q, k, v), "cpu").bytes)
    assert 0 < peaks[0]
    assert peaks[1] / peaks[0] < 2.3 and peaks[2] / peaks[1] < 2.3, peaks  # quadratic would be ~4


def test_calibration_beats_the_uncalibrated_projection_on_held_out_inputs():
    torch.manual_seed(0)
    attn = build_variant("linformer", k=16, max_seq_len=64)
    held_out = _local(seed=0)
    ref = reference_attention(*held_out)
    batches = [_local(seed=100 + i) for i in range(4)]  # same distribution, other seeds

    def error() -> float:
        with torch.no_grad():
            return float((attn(*held_out).double() - ref).norm() / ref.norm())

    before = error()
    report = calibrate(attn, batches, steps=60, lr=3e-2)
    assert report.loss == "mse"  # the auto choice: Linformer's weights are over projected rows
    assert error() < 0.9 * before  # 1.00 -> 0.77 with this seed
    assert math.isfinite(report.loss_after) and report.loss_after < report.loss_before
