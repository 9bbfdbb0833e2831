"""harness.measure.limits and roofline by value: the bytes a cell must move counted by hand (GQA, M != N, dtype
sizes, train, layer, decode), the ceiling each dtype or autocast precision is held to, the percentages on planted
limits, and the limit formulas (2 n^3 FLOPs, 2 bytes per byte copied) on a planted clock."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from harness.measure import limits as limits_mod
from harness.measure.roofline import bytes_moved, compute_dtype, judged, roofline_fields
from harness.row import Row
from harness.schema import Cell


def _cell(**fields) -> Cell:
    from variants import build_config

    values = dict(seq_len=48, kv_len=80, batch=3, heads=4, kv_heads=2, head_dim=8, dtype="float32", device="cpu")
    values.update(inputs="gaussian", causal=False, mode="forward", seed=0)
    return Cell(variant="dense", config=build_config("dense").to_dict(), **{**values, **fields})


def _by_hand(B=3, H=4, Hkv=2, N=48, M=80, D=8, e=4) -> int:
    """q and out over N query rows of H heads; k and v over M keys of H_kv heads."""
    return (B * N * H * D) * e * 2 + (B * M * Hkv * D) * e * 2


@pytest.mark.parametrize("dtype, e", [("float32", 4), ("bfloat16", 2), ("float16", 2)])
def test_prefill_bytes_count_gqa_kv_heads_the_key_length_and_the_dtype(dtype, e):
    assert bytes_moved(_cell(dtype=dtype)) == _by_hand(e=e)
    assert bytes_moved(_cell(dtype=dtype, kv_heads=4)) == _by_hand(Hkv=4, e=e)  # MHA: k, v as large as q
    # train: the output gradient read and dq, dk, dv written, each the size of its forward tensor
    assert bytes_moved(_cell(dtype=dtype, mode="train")) == 2 * _by_hand(e=e)


def test_autocast_inputs_stay_float32_in_memory():
    # autocast computes in bf16, but the inputs and the output it is handed stay float32 tensors: 4 bytes each
    assert bytes_moved(_cell(precision="autocast-bf16", mode="train")) == 2 * _by_hand(e=4)


def test_layer_bytes_are_the_blocks_input_and_output():
    cell = _cell(scope="layer", kv_len=48, dtype="bfloat16")
    assert bytes_moved(cell) == 2 * (3 * 48 * 4 * 8) * 2  # x (B, N, H * D) read, the same written


def test_decode_bytes_are_the_live_state_and_one_tokens_q_k_v_and_output():
    cell = _cell(phase="decode", causal=True, kv_len=48, dtype="bfloat16")
    token = (3 * 4 * 8 + 3 * 2 * 8 + 3 * 2 * 8 + 3 * 4 * 8) * 2  # q, k, v (H_kv heads), out
    assert bytes_moved(cell, state_bytes=12_345) == 12_345 + token
    row = Row(cell=cell, latency_s=0.5, flops=1, state_live_bytes=1000, state_bytes=10**9)  # live, not the capacity
    assert roofline_fields(row, None)["bytes_moved"] == 1000 + token
    assert roofline_fields(row.update(state_live_bytes=None), None)["bytes_moved"] == 10**9 + token


@pytest.mark.parametrize(
    "precision, dtype, expected",
    [("fp32", "float32", "float32"), ("fp32", "bfloat16", "bfloat16"), ("autocast-bf16", "float32", "bfloat16")]
    + [("autocast-fp16", "float32", "float16")],
)
def test_the_compute_dtype_is_the_autocast_dtype_where_there_is_one(precision, dtype, expected):
    assert compute_dtype(_cell(precision=precision, dtype=dtype)) == expected


def test_int8_scores_compute_in_int8_so_no_float_peak_judges_them():
    assert (
        compute_dtype(_cell(scores_dtype="int8")) == "int8" and compute_dtype(_cell(scores_dtype="none")) == "float32"
    )


def _limits(**per_dtype) -> dict:
    """Planted run limits: {dtype: (ceiling FLOP/s, bandwidth)}, a cache too small to excuse anything."""
    entries = {d: {"peak_flops": p, "ceiling_flops": p, "bandwidth_bytes_per_s": bw, "cache_bytes": 1} for d, (p, bw) in per_dtype.items()}  # fmt: skip
    return {"dtypes": entries}


def test_percentages_are_against_the_ceiling_of_the_dtype_the_cell_computes_in():
    limits = _limits(float32=(1e9, 1e9), bfloat16=(4e9, 1e9))
    cell = _cell(precision="autocast-bf16")
    row = Row(cell=cell, status="ok", latency_s=0.25, flops=2e9)  # 8 GFLOP/s
    fields = judged(row, limits, load=0.0)
    assert fields["pct_of_compute_peak"] == pytest.approx(200.0)  # 8 over bf16's 4, not 800% of fp32's 1
    assert fields["bytes_moved"] == _by_hand() and fields["bytes_per_s"] == pytest.approx(_by_hand() / 0.25)
    assert fields["pct_of_bandwidth"] == pytest.approx(100.0 * _by_hand() / 0.25 / 1e9)
    assert "200% of the measured compute peak (0.004 TFLOP/s)" in fields["impossible"]
    assert judged(row.update(status="oom"), limits, load=0.0).get("pct_of_compute_peak") is None


def test_the_row_is_held_to_the_ceiling_not_the_dtypes_own_peak():
    limits = _limits(bfloat16=(1e9, 1e12))
    limits["dtypes"]["bfloat16"]["ceiling_flops"] = 4e9  # a CPU bf16 kernel computing in float32
    fields = roofline_fields(Row(cell=_cell(dtype="bfloat16"), latency_s=1.0, flops=2e9), limits)
    assert fields["pct_of_compute_peak"] == pytest.approx(50.0) and "impossible" not in fields


def _planted(peaks: dict[str, float]):
    def measure(device, dtype):
        name = str(dtype).removeprefix("torch.")
        return {"peak_flops": peaks[name], "bandwidth_bytes_per_s": 1e9, "measured_at_unix": time.time(), "load_per_cpu": 0.0}  # fmt: skip

    return measure


@pytest.mark.parametrize("device", ["cpu", "cuda:0"], ids=["on-cpu", "on-gpu"])
def test_a_cpu_low_precision_ceiling_is_at_least_float32s_and_a_gpus_is_its_own_peak(tmp_path, monkeypatch, device):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(limits_mod, "device_label", lambda device: "planted machine")
    monkeypatch.setattr(limits_mod, "measure_limits", _planted({"float32": 3e9, "bfloat16": 1e9, "float16": 5e9}))
    entries = limits_mod.run_limits(device, ["float32", "bfloat16", "float16"])["dtypes"]
    ceilings = {dtype: entry["ceiling_flops"] for dtype, entry in entries.items()}
    if device == "cpu":  # bf16 emulated below fp32's rate: a kernel may upcast, so fp32's rate is reachable
        assert ceilings == {"float32": 3e9, "bfloat16": 3e9, "float16": 5e9}
    else:
        assert ceilings == {"float32": 3e9, "bfloat16": 1e9, "float16": 5e9}
    assert {dtype: entry["peak_flops"] for dtype, entry in entries.items()} == {"float32": 3e9, "bfloat16": 1e9, "float16": 5e9}  # fmt: skip


def test_the_limits_measured_are_the_sweeps_dtypes_and_its_autocast_dtypes():
    spec = SimpleNamespace(dtypes=("bfloat16",), precisions=("fp32", "autocast-fp16", "autocast-bf16"))
    assert limits_mod.limit_dtypes(spec) == ["float32", "bfloat16", "float16"]
    assert limits_mod.limit_dtypes(SimpleNamespace(dtypes=("float32",), precisions=("fp32",))) == ["float32"]


def test_the_limit_formulas_on_a_planted_clock(monkeypatch):
    monkeypatch.setitem(limits_mod.SIZES, "cpu", (256, 1 << 16, 0.01))
    monkeypatch.setattr(limits_mod, "_best_matmul", lambda device, dtype, largest, seconds: (512, 0.25))
    copied = []

    def fastest(call, device, seconds):
        copied.append(call.args[0].numel())  # dst.copy_(src): the bytes copied
        return 0.5

    monkeypatch.setattr(limits_mod, "_fastest", fastest)
    monkeypatch.setattr(limits_mod, "last_level_cache_bytes", lambda device: 123)
    entry = limits_mod.measure_limits("cpu", torch.float32)
    assert copied == [1 << 16]
    assert entry["peak_flops"] == pytest.approx(2 * 512**3 / 0.25)  # 2 FLOPs per multiply-add
    assert entry["bandwidth_bytes_per_s"] == pytest.approx(2 * (1 << 16) / 0.5)  # read + write
    assert entry["cache_bytes"] == 123 and "512x512 float32 matmul" in entry["method"]


def test_the_matmul_side_grows_while_the_rate_grows_by_more_than_a_tenth(monkeypatch):
    rates = {256: 1e9, 512: 2e9, 1024: 2.1e9, 2048: 9e9}  # 1024 is within a tenth of 512: the search stops there
    timed = []

    def once(call, device):
        n = call.args[0].shape[0]
        return 2 * n**3 / rates[n]

    def fastest(call, device, seconds):
        timed.append(call.args[0].shape[0])
        return 0.125

    monkeypatch.setattr(limits_mod, "_once_s", once)
    monkeypatch.setattr(limits_mod, "_fastest", fastest)
    assert limits_mod._best_matmul("cpu", torch.float32, 2048, 0.01) == (512, 0.125) and timed == [512]
    rates[1024] = 2.3e9  # more than a tenth better: kept, then 2048 is past `largest`
    assert limits_mod._best_matmul("cpu", torch.float32, 1024, 0.01)[0] == 1024


def test_a_slow_call_stops_the_doubling(monkeypatch):
    monkeypatch.setattr(limits_mod, "_once_s", lambda call, device: limits_mod.SLOWEST_CALL_S)  # already slow at 256
    monkeypatch.setattr(limits_mod, "_fastest", lambda call, device, seconds: call.args[0].shape[0])
    assert limits_mod._best_matmul("cpu", torch.float32, 1024, 0.01) == (256, 256)
