"""Input distributions: seeded, and each with the structure it promises (counted on attention weights)."""

from __future__ import annotations

import pytest
import torch

from harness.inputs import get_inputs, list_inputs, make_inputs, parse_inputs, register_inputs
from variants import attention_weights

N, D = 512, 32


def _weights(name, **params):
    q, k, _ = make_inputs(name, params, B=1, H=2, N=N, D=D, seed=3)
    return attention_weights(q, k)[0]  # (H, N, M)


def _mass_near_diagonal(w, width=32):
    i = torch.arange(N)
    return float((w * ((i[:, None] - i[None, :]).abs() <= width)).sum(-1).mean())


def _entropy(w):
    return float(-(w * w.clamp_min(1e-30).log()).sum(-1).mean())


def test_builtins_are_registered_and_documented():
    assert {"gaussian", "local", "global", "lowrank"} <= set(list_inputs())
    for name in ("gaussian", "local", "global", "lowrank"):
        assert get_inputs(name).doc


@pytest.mark.parametrize("name", ["gaussian", "local", "global", "lowrank"])
def test_seeded_shapes_and_dtype(name):
    a = make_inputs(name, B=2, H=3, N=40, M=40, D=16, dtype=torch.bfloat16, seed=1)
    b = make_inputs(name, B=2, H=3, N=40, M=40, D=16, dtype=torch.bfloat16, seed=1)
    c = make_inputs(name, B=2, H=3, N=40, M=40, D=16, dtype=torch.bfloat16, seed=2)
    assert [t.shape for t in a] == [(2, 3, 40, 16)] * 3
    assert all(t.dtype == torch.bfloat16 for t in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_local_concentrates_near_the_diagonal():
    gaussian, local = _mass_near_diagonal(_weights("gaussian")), _mass_near_diagonal(_weights("local"))
    assert gaussian < 0.2  # ~65/512 of the keys
    assert local > 0.8


def test_global_puts_mass_on_a_few_distant_keys():
    positions = torch.linspace(0, N - 1, 4).round().long()
    on_global = float(_weights("global")[:, :, positions].sum(-1).mean())
    baseline = float(_weights("gaussian")[:, :, positions].sum(-1).mean())
    assert on_global > 0.15 > 20 * baseline


def test_lowrank_q_and_k_span_rank_dimensions():
    q, k, v = make_inputs("lowrank", {"rank": 4}, B=1, H=1, N=64, D=D, seed=0)
    assert int(torch.linalg.matrix_rank(q[0, 0])) == 4
    assert int(torch.linalg.matrix_rank(torch.cat([q, k], dim=2)[0, 0])) == 4
    assert int(torch.linalg.matrix_rank(v[0, 0])) == D


def test_scale_knob_sharpens_attention():
    assert _entropy(_weights("gaussian", scale=4.0)) < _entropy(_weights("gaussian", scale=1.0)) - 1.0


def test_parse_inputs_types_knobs_like_their_defaults():
    assert parse_inputs("gaussian:scale=4") == ("gaussian", {"scale": 4.0})
    assert parse_inputs("lowrank:rank=3") == ("lowrank", {"rank": 3})


def test_unknown_name_and_knob():
    with pytest.raises(ValueError, match=r"Unknown inputs 'lowrnak'.*Did you mean 'lowrank'"):
        get_inputs("lowrnak")
    with pytest.raises(ValueError, match=r"no parameter 'rnk'.*Did you mean 'rank'"):
        make_inputs("lowrank", {"rnk": 2}, B=1, H=1, N=8, D=8)


def test_a_generator_can_be_unsupported_with_a_reason_and_a_max_length():
    @register_inputs("t_limited", max_seq_len=64, availability=lambda: None)
    def limited(B, H, N, M, D, *, generator, device):
        """Test: at most 64 tokens."""
        return tuple(torch.zeros(B, H, L, D) for L in (N, M, M))

    @register_inputs("t_missing", availability=lambda: "needs the extra: pip install 'attnsuite[real]'")
    def missing(B, H, N, M, D, *, generator, device):
        """Test: never available."""
        raise AssertionError("must not be called")

    try:
        assert get_inputs("t_limited").unsupported_reason(64, 64) is None
        assert "go up to 64 tokens" in get_inputs("t_limited").unsupported_reason(65, 65)
        with pytest.raises(ValueError, match=r"needs the extra"):
            make_inputs("t_missing", B=1, H=1, N=8, D=8)
    finally:
        from harness.inputs import registry as inputs

        inputs._INPUTS.pop("t_limited", None)
        inputs._INPUTS.pop("t_missing", None)


def test_a_generator_can_refuse_a_shape_with_a_reason():
    @register_inputs(
        "t_fixed_dim", shape_check=lambda B, H, N, M, D, **_: [] if D == 32 else [f"head_dim must be 32, got D={D}"]
    )
    def fixed(B, H, N, M, D, *, generator, device):
        """Test: only head_dim 32."""
        return tuple(torch.zeros(B, H, L, D) for L in (N, M, M))

    try:
        spec = get_inputs("t_fixed_dim")
        assert spec.unsupported_reason(8, 8, B=1, H=1, D=32) is None
        assert spec.unsupported_reason(8, 8, B=1, H=1, D=64) == "inputs 't_fixed_dim': head_dim must be 32, got D=64"
        with pytest.raises(ValueError, match="head_dim must be 32, got D=64"):
            make_inputs("t_fixed_dim", B=1, H=1, N=8, D=64)
    finally:
        from harness.inputs import registry as inputs

        inputs._INPUTS.pop("t_fixed_dim", None)


def test_a_shape_check_gets_only_the_keywords_it_names():
    """A check written as shape_check(B, H, N, M, D) (the first documented form) keeps working; one naming kv_heads or
    a param gets it; one with **kwargs gets all."""
    seen = {}

    def plain(B, H, N, M, D):
        return [] if D == 32 else [f"D={D}"]

    def named(B, H, N, M, D, *, kv_heads=None):
        seen["named"] = kv_heads
        return []

    def every(B, H, N, M, D, **kwargs):
        seen["every"] = kwargs
        return []

    def make(B, H, N, M, D, *, generator, device, scale: float = 1.0):
        """Test: zeros."""
        return tuple(torch.zeros(B, H, L, D) for L in (N, M, M))

    from harness.inputs import registry as inputs

    try:
        for name, check in (("t_plain", plain), ("t_named", named), ("t_every", every)):
            register_inputs(name, shape_check=check)(make)
        assert get_inputs("t_plain").unsupported_reason(8, 8, B=1, H=2, D=64, H_kv=1, params={"scale": 2.0}) == (
            "inputs 't_plain': D=64"
        )
        assert get_inputs("t_named").unsupported_reason(8, 8, B=1, H=2, D=32, H_kv=1, params={"scale": 2.0}) is None
        assert get_inputs("t_every").unsupported_reason(8, 8, B=1, H=2, D=32, H_kv=1, params={"scale": 2.0}) is None
        assert seen == {"named": 1, "every": {"kv_heads": 1, "scale": 2.0}}
    finally:
        for name in ("t_plain", "t_named", "t_every"):
            inputs._INPUTS.pop(name, None)
