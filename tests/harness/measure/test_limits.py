"""harness.measure.limits and roofline: the machine's measured peak and bandwidth, cached for a day; every ok row held
against them, and a number above them flagged impossible (never a winner)."""

from __future__ import annotations

import pytest
import torch

from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure import limits as limits_mod
from harness.row import Row
from harness.measure.roofline import IMPOSSIBLE_ABOVE_PCT, bytes_moved, roofline_fields
from harness.schema import Cell

FAST = MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=16)


@pytest.fixture(scope="module", autouse=True)
def test_variants():
    from tests.helpers.sweep_fixtures import load_test_variants

    unload = load_test_variants()
    yield
    unload()


@pytest.fixture(scope="module")
def cpu_limits():
    return limits_mod.run_limits("cpu", ["float32"])  # the user's day cache: measured at most once a day


def _cell(variant="dense", N=64, **fields) -> Cell:
    from variants import build_config

    values = dict(seq_len=N, kv_len=N, batch=1, heads=2, head_dim=16, dtype="float32", device="cpu", inputs="gaussian")
    values.update(causal=False, mode="forward", seed=0)
    return Cell(variant=variant, config=build_config(variant).to_dict(), **{**values, **fields})


def test_cpu_limits_are_measured_with_their_method(cpu_limits):
    entry = cpu_limits["dtypes"]["float32"]
    assert entry["peak_flops"] > 1e8 and entry["bandwidth_bytes_per_s"] > 1e8  # any CPU does 0.1 GFLOP/s, 0.1 GB/s
    assert entry["ceiling_flops"] == entry["peak_flops"]
    assert "matmul" in entry["method"] and "copy" in entry["method"] and entry["threads"] == torch.get_num_threads()
    assert cpu_limits["datasheet"] is None  # no datasheet for a CPU


def test_limits_are_cached_per_device_dtype_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    fake = {"peak_flops": 1e9, "bandwidth_bytes_per_s": 1e9, "measured_at_unix": 0, "load_per_cpu": 0.0}

    def measure(device, dtype):
        calls.append(dtype)
        return {**fake, "measured_at_unix": __import__("time").time()}

    monkeypatch.setattr(limits_mod, "measure_limits", measure)
    limits_mod.run_limits("cpu", ["float32", "bfloat16"])
    limits_mod.run_limits("cpu", ["float32", "bfloat16"])
    assert calls == [torch.float32, torch.bfloat16]  # the second run read the cache
    assert (tmp_path / "attnsuite" / limits_mod.CACHE_FILE).is_file()
    limits_mod.run_limits("cpu", ["float32"], remeasure=True)
    assert calls[-1] == torch.float32 and len(calls) == 3


def test_datasheets_of_known_gpus():
    assert limits_mod.datasheet("NVIDIA H200")["bandwidth_bytes_per_s"] == 4.8e12
    assert limits_mod.datasheet("NVIDIA H100 80GB HBM3")["peak_flops"]["bfloat16"] == 989e12
    assert limits_mod.datasheet("AMD EPYC") is None


def test_bytes_moved_counts_inputs_output_and_state():
    e = 4
    assert bytes_moved(_cell(N=64)) == (2 * 2 * 64 * 16 + 2 * 2 * 64 * 16) * e  # q, out; k, v
    assert bytes_moved(_cell(N=64, mode="train")) == 2 * bytes_moved(_cell(N=64))
    decode = _cell(N=64, phase="decode", causal=True)
    assert bytes_moved(decode, state_bytes=1000) == 1000 + 2 * (2 * 16 + 2 * 16) * e


def test_a_planted_wrong_flop_formula_is_flagged_impossible(cpu_limits):
    run = RunInfo(run_id="t", device_name="cpu", host="h", threads=torch.get_num_threads(), limits=cpu_limits)
    good = measure_cell(_cell("dense"), FAST, run).to_dict()
    assert good["status"] == "ok" and good["impossible"] is None
    assert 0 < good["pct_of_compute_peak"] < IMPOSSIBLE_ABOVE_PCT and good["pct_of_bandwidth"] > 0
    assert good["useful_flops"] == good["flops"] and good["bytes_per_s"] == good["bytes_moved"] / good["latency_s"]
    bad = measure_cell(_cell("t_badflops"), FAST, run).to_dict()
    assert bad["status"] == "ok" and bad["pct_of_compute_peak"] > IMPOSSIBLE_ABOVE_PCT
    assert "compute peak" in bad["impossible"]


def test_a_row_without_limits_gets_bytes_but_no_percentages():
    fields = roofline_fields(Row(cell=_cell(), latency_s=1.0, flops=10), None)
    assert fields == {"bytes_moved": bytes_moved(_cell()), "bytes_per_s": float(bytes_moved(_cell()))}


def test_compute_just_beyond_the_tolerance_is_impossible_and_at_the_peak_is_not():
    # the field's wrong numbers are 1.5-2x the chip (a causal FLOP count doubled), not a million times it
    limits = {"dtypes": {"float32": {"peak_flops": 100.0, "bandwidth_bytes_per_s": 1e18, "cache_bytes": 10**9}}}
    at_peak = roofline_fields(Row(cell=_cell(), latency_s=1.0, flops=100), limits)
    assert at_peak["pct_of_compute_peak"] == 100.0 and "impossible" not in at_peak
    doubled = roofline_fields(Row(cell=_cell(), latency_s=1.0, flops=200), limits)
    assert doubled["pct_of_compute_peak"] == 200.0 and "200% of the measured compute peak" in doubled["impossible"]


def test_bandwidth_above_the_limit_is_impossible_only_beyond_the_cache():
    limits = {"dtypes": {"float32": {"peak_flops": 1e18, "bandwidth_bytes_per_s": 1.0, "cache_bytes": 10**9}}}
    row = Row(cell=_cell(), latency_s=1.0, flops=1)
    assert "impossible" not in roofline_fields(row, limits)  # it fits in the cache
    limits["dtypes"]["float32"]["cache_bytes"] = 1
    assert "bandwidth" in roofline_fields(row, limits)["impossible"]


@pytest.mark.cuda
def test_cuda_limits_are_measured():
    entry = limits_mod.measure_limits("cuda", torch.bfloat16)
    assert entry["peak_flops"] > 1e12 and entry["bandwidth_bytes_per_s"] > 1e11 and entry["cache_bytes"]


def test_a_decode_row_moves_its_live_state_not_the_caches_capacity(cpu_limits):
    run = RunInfo(run_id="t", device_name="cpu", host="h", threads=torch.get_num_threads(), limits=cpu_limits)
    row = measure_cell(_cell("dense", N=64, phase="decode", causal=True), FAST, run).to_dict()
    assert row["status"] == "ok", row["reason"]
    live = 2 * 2 * 64 * 16 * 4  # k and v of the 64 context tokens, float32
    assert row["state_live_bytes"] == live and row["state_bytes"] == 2 * live  # capacity 2N
    assert row["bytes_moved"] == live + 2 * (2 * 16 + 2 * 16) * 4
    assert row["pct_of_bandwidth"] > 0 and row["impossible"] is None


def test_limits_measured_under_load_are_not_cached_and_flag_nothing(tmp_path, monkeypatch):
    """A peak measured on a busy machine understates it: reused, it would flag every good row of the day impossible."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def busy(device, dtype):
        calls.append(dtype)
        return {"peak_flops": 1.0, "bandwidth_bytes_per_s": 1.0, "measured_at_unix": __import__("time").time(),
                "load_per_cpu": 9.0}  # fmt: skip

    monkeypatch.setattr(limits_mod, "measure_limits", busy)
    measured = limits_mod.run_limits("cpu", ["float32"])
    limits_mod.run_limits("cpu", ["float32"])
    assert len(calls) == 2  # measured again: the first was not cached
    fields = roofline_fields(Row(cell=_cell(), latency_s=1.0, flops=10**6), measured)
    assert fields["pct_of_compute_peak"] > 100 and "impossible" not in fields
