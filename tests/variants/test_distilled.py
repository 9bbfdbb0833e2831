"""The distilled linear-attention student: its formula, causal chunks, stability, cost, save/load."""

from __future__ import annotations

import pytest
import torch

from harness.inputs import make_inputs
from harness.measure.memory import measure_peak_memory
from variants import NotSupportedError, build_variant, distilled
from variants.calibrate import calibrate
from variants.checkpoint import load_variant, save_variant


def _qkv(seed: int, B: int = 2, H: int = 2, N: int = 45, D: int = 16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g) for _ in range(3)]


def _student(**fields):
    torch.manual_seed(0)
    return build_variant("distilled", **fields)


@pytest.mark.parametrize("block", [16, None], ids=["blocks_of_16", "one_block"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_equals_its_materialised_weights_times_v(causal, block, monkeypatch):
    if block is not None:  # the non-causal sums run over _BLOCK keys at a time: make N = 45 three blocks
        monkeypatch.setattr(distilled, "_BLOCK", block)
    attn = _student(features=12, chunk=8)  # N = 45: a ragged last chunk
    q, k, v = _qkv(0)
    mask = torch.ones(2, 45, dtype=torch.bool)
    mask[0, 30:] = False
    with torch.no_grad():
        out = attn(q, k, v, causal=causal, kv_mask=mask)
        weights = attn.attention_weights(q, k, causal=causal, kv_mask=mask)  # (B, H, N, M)
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)
    assert (weights[0, :, :, 30:] == 0).all()  # padded keys get no weight
    if causal:
        assert (weights.triu(1) == 0).all()
    torch.testing.assert_close(out, weights @ v, rtol=1e-5, atol=1e-5)


def test_attention_weights_are_hedgehogs_feature_map():
    """phi(x) = [softmax(xW + b), softmax(-(xW + b))]; A_ij = phi(q_i).phi(k_j) / sum_j (causal: j <= i)."""
    attn = _student(features=6)
    q, k, _ = _qkv(9, N=20)
    with torch.no_grad():
        attn.materialize(2, 16)
        attn.bias.normal_()  # a non-zero bias, so it is checked too
        got = {c: attn.attention_weights(q, k, causal=c) for c in (False, True)}
        W, b = attn.weight.double(), attn.bias.double()  # (H, D, F), (H, 1, F)

    def phi(x):
        proj = x.double() @ W + b  # (B, H, N, F)
        return torch.cat([proj.softmax(-1), (-proj).softmax(-1)], -1)

    scores = phi(q) @ phi(k).transpose(-1, -2)  # (B, H, N, M)
    for causal in (False, True):
        s = scores.tril() if causal else scores
        torch.testing.assert_close(got[causal].double(), s / s.sum(-1, keepdim=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_padded_keys_with_inf_and_nan_are_the_keys_removed(causal):
    """Padded keys get phi(k) = 0 and v = 0, with where (not 0 * x): inf/nan there changes nothing.

    The student has no positions, so dropping the padded tokens gives the same output at the real
    rows, causal included (the prefix order of the real tokens is unchanged).
    """
    attn = _student(features=12, chunk=8)
    q, k, v = _qkv(10)  # B = 2, N = 45: chunks of 8 cross the padding
    mask = torch.ones(2, 45, dtype=torch.bool)
    mask[0, 30:] = False  # right padding
    mask[1, torch.randperm(45, generator=torch.Generator().manual_seed(2))[:15]] = False  # scattered
    mask[1, 0] = True
    pad = ~mask[:, None, :, None].expand_as(k)
    poison = torch.tensor([float("inf"), float("nan"), -float("inf")]).repeat(int(pad.sum()) // 3 + 1)[: int(pad.sum())]
    k2, v2 = k.clone(), v.clone()
    k2[pad], v2[pad] = poison, poison.roll(1)
    with torch.no_grad():
        out = attn(q, k2, v2, causal=causal, kv_mask=mask)
        for i in range(2):
            real = mask[i]
            alone = attn(q[i : i + 1, :, real], k[i : i + 1, :, real], v[i : i + 1, :, real], causal=causal)
            assert torch.isfinite(out[i][:, real]).all()
            torch.testing.assert_close(out[i : i + 1, :, real], alone, rtol=1e-5, atol=1e-6)


def test_causal_output_does_not_depend_on_the_chunk_length():
    q, k, v = _qkv(1)
    outs = []
    for chunk in (3, 7, 64):
        attn = _student(chunk=chunk)
        with torch.no_grad():
            outs.append(attn(q, k, v, causal=True))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs[2], outs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_large_logits_stay_finite_in_half_precision(dtype, causal):
    attn = _student()
    q, k, v = (t * 300 for t in _qkv(2))  # q.k / sqrt(D) ~ 1e5: exp would overflow float16 (and float32)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    with torch.no_grad():
        out = attn(q, k, v, causal=causal)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert out.abs().max() <= v.abs().max() * 1.01  # a convex combination of the values


def test_a_student_fitted_at_one_length_serves_every_length():
    attn = _student(features=8)
    calibrate(attn, [_qkv(3, N=64)], steps=5)
    n_params = sum(p.numel() for p in attn.parameters())
    for n in (1, 17, 300):
        q, k, v = _qkv(4, N=n)
        with torch.no_grad():
            assert attn(q, k, v, causal=True).shape == q.shape
    assert sum(p.numel() for p in attn.parameters()) == n_params


def test_a_built_student_refuses_another_head_dim_or_head_count():
    attn = _student()
    with torch.no_grad():
        attn(*_qkv(5, H=2, D=16))
    with pytest.raises(NotSupportedError, match=r"built for head dim D=16, got D=32"):
        attn(*_qkv(5, H=2, D=32))
    with pytest.raises(NotSupportedError, match=r"built for H_kv=2 K/V heads, got H_kv=3 \(q has H=3\)"):
        attn(*_qkv(5, H=3, D=16))
    shared = _student(per_head=False)
    with torch.no_grad():
        shared(*_qkv(5, H=2))
        assert shared(*_qkv(5, H=3)).shape[1] == 3  # one map for all heads: any H


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (dict(features=0), ValueError, r"features must be >= 1, got 0"),
        (dict(features="8"), TypeError, r"features must be an integer, got '8'"),
        (dict(chunk=0), ValueError, r"chunk must be >= 1, got 0"),
        (dict(per_head="yes"), TypeError, r"per_head must be a bool, got 'yes'"),
        (dict(init_noise=-1.0), ValueError, r"init_noise must be a number >= 0, got -1.0"),
    ],
)
def test_bad_configs_name_the_field_and_value(fields, error, match):
    with pytest.raises(error, match=match):
        build_variant("distilled", **fields)


def test_flops_grow_linearly_in_length_with_or_without_causal():
    attn = _student(features=64)
    for causal in (False, True):
        f = [attn.flops(1, 4, n, n, 64, causal) for n in (4096, 8192, 16384)]
        assert f[1] == 2 * f[0] and f[2] == 2 * f[1]
    assert attn.flops(1, 1, 1024, 1024, 64, False) == 2 * 2048 * 64 * 64 + 4 * 1024 * 128 * 64 + 2 * 1024 * 128


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_peak_memory_grows_linearly_in_length(causal):
    attn = _student(features=16, chunk=256)  # few chunks: the profiler costs per op
    peaks = []
    for n in (2048, 4096, 8192):
        q, k, v = _qkv(6, B=1, H=2, N=n, D=16)
        with torch.no_grad():
            peaks.append(measure_peak_memory(lambda: attn(q, k, v, causal=causal), "cpu").bytes)
    assert peaks[0] > 0
    assert peaks[1] / peaks[0] < 2.3 and peaks[2] / peaks[1] < 2.3, peaks  # an N x N matrix would give ~4


def test_save_and_load_round_trip_a_fitted_student_exactly(tmp_path):
    attn = _student(features=8)
    batches = [make_inputs("local", {"scale": 4.0}, B=2, H=2, N=32, D=16, seed=100)]
    calibrate(attn, batches, steps=10)
    path = save_variant(attn, tmp_path / "student.pt")
    loaded = load_variant(path)
    assert loaded.config == attn.config
    q, k, v = _qkv(7)
    with torch.no_grad():
        for causal in (False, True):
            assert torch.equal(loaded(q, k, v, causal=causal), attn(q, k, v, causal=causal))
    into = load_variant(path, into=_student(features=8))
    assert torch.equal(into.weight, attn.weight)


def test_loading_into_another_config_names_what_differs(tmp_path):
    attn = _student(features=8)
    calibrate(attn, [_qkv(8)], steps=1)
    path = save_variant(attn, tmp_path / "student.pt")
    with pytest.raises(ValueError, match=r"features: saved 8, given 16"):
        load_variant(path, into=_student(features=16))
    with pytest.raises(ValueError, match=r"holds a 'distilled'.*cannot load into 'linformer'"):
        load_variant(path, into=build_variant("linformer", k=4, max_seq_len=64))
    with pytest.raises(FileNotFoundError, match=r"no saved variant at"):
        load_variant(tmp_path / "missing.pt")


def test_a_built_student_refuses_to_decode_another_head_count():
    attn = _student()
    with torch.no_grad():
        attn(*_qkv(5, H=2, D=16))
        k = torch.randn(1, 4, 5, 16)
        with pytest.raises(NotSupportedError, match=r"built for H_kv=2 K/V heads, got H_kv=4"):
            attn.init_state(k, k)


def test_non_causal_student_exports_with_a_dynamic_length(monkeypatch):
    """torch.export at N=40 (three _BLOCK slices eagerly) gives one program that runs at N=24 and N=40 as eager does.

    Before: the feature map's cached cast read data_ptr (fake tensors have none) and the block loop fixed N."""
    monkeypatch.setattr(distilled, "_BLOCK", 16)
    attn = _student(features=12).eval()

    class Call(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = attn

        def forward(self, q, k, v):
            return self.attn(q, k, v)

    n = torch.export.Dim.DYNAMIC
    with torch.no_grad():
        attn(*_qkv(0, N=40))  # creates the feature map's parameters
        program = torch.export.export(Call(), tuple(_qkv(0, N=40)), dynamic_shapes=[{2: n}] * 3).module()
        for N in (24, 40):
            q, k, v = _qkv(N, N=N)
            torch.testing.assert_close(program(q, k, v), attn(q, k, v), atol=1e-6, rtol=1e-5)
