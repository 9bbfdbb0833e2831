"""One cell -> one row: values checked against counted quantities, every failure a status."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from harness.measure import MeasureContext, MeasureSettings, RunInfo, is_oom, measure_cell, sample_rows
from harness.row import ROW_FIELDS
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=16, calibration_steps=20, calibration_batches=2)
B, H, D = 1, 2, 16


@pytest.fixture(scope="module", autouse=True)
def test_variants():
    from tests.helpers.sweep_fixtures import load_test_variants

    unload = load_test_variants()
    yield
    unload()


def cell(variant="dense", N=64, *, mode="forward", causal=False, config=None, inputs="gaussian", seed=0) -> Cell:
    from variants import build_config

    return Cell(
        variant=variant,
        config=build_config(variant, **(config or {})).to_dict(),
        seq_len=N,
        kv_len=N,
        batch=B,
        heads=H,
        head_dim=D,
        dtype="float32",
        device="cpu",
        causal=causal,
        mode=mode,
        inputs=inputs,
        seed=seed,
    )


def test_dense_forward_row_is_complete_and_plausible():
    row = measure_cell(cell(N=64), FAST, RUN).to_dict()
    assert set(row) == set(ROW_FIELDS)
    assert row["status"] == "ok", row["reason"]
    assert row["backend"] == "sdpa"
    assert row["accuracy_reference"] == "full"  # what its errors are against, in the row itself
    assert row["flops"] == 4 * B * H * 64 * 64 * D
    assert row["tflops"] == pytest.approx(row["flops"] / row["latency_s"] / 1e12)
    assert 0 < row["latency_p20_s"] <= row["latency_s"] <= row["latency_p80_s"]
    assert row["repeats"] >= 2
    assert row["rel_l2_error"] < 1e-5 and row["max_abs_error"] < 1e-5 and row["cosine"] > 0.99999
    assert row["error_rows"] == 16
    assert row["peak_memory_bytes"] >= B * H * 64 * D * 4  # at least the output
    assert row["memory_method"] == "cpu_profiler_events"
    assert row["grad_rel_l2_q"] is None and row["calibration"] is None


def test_train_mode_checks_gradients_and_counts_backward_flops():
    row = measure_cell(cell(N=48, mode="train", causal=True), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert row["flops"] == int(round(4 * B * H * 48 * 48 * D / 2 * 3.5))
    for name in ("grad_rel_l2_q", "grad_rel_l2_k", "grad_rel_l2_v"):
        assert row[name] < 1e-5
    assert row["grad_check_seq_len"] == 48


def test_gradient_check_catches_wrong_gradients():
    row = measure_cell(cell("t_badgrad", N=32, mode="train"), FAST, RUN).to_dict()
    assert row["status"] == "ok"
    assert row["rel_l2_error"] < 1e-5  # the forward is exact...
    assert row["grad_rel_l2_v"] == pytest.approx(0.5, rel=1e-3)  # ...its gradients are halved


def test_memory_counts_a_known_allocation():
    small = measure_cell(cell("t_alloc", config={"nbytes": 4 << 20}), FAST, RUN).to_dict()
    large = measure_cell(cell("t_alloc", config={"nbytes": 12 << 20}), FAST, RUN).to_dict()
    output = B * H * 64 * D * 4
    # at least the 4 MiB scratch; at most it, the output and 64 KiB (the profiler's events of the output's clone and
    # the scratch's free can land in either order: CI once counted 4 MiB + 6 KiB, the output not yet live at the peak)
    assert 4 << 20 <= small["peak_memory_bytes"] < (4 << 20) + output + 65536
    assert large["peak_memory_bytes"] - small["peak_memory_bytes"] == 8 << 20


@pytest.mark.parametrize(
    "variant,match",
    [
        ("t_oom", "CUDA out of memory"),
        ("t_cpu_oom", "can't allocate memory"),
        ("t_memerror", "MemoryError"),
    ],
)
def test_out_of_memory_becomes_an_oom_row(variant, match):
    row = measure_cell(cell(variant, N=128), FAST, RUN).to_dict()
    assert row["status"] == "oom"
    assert match in row["reason"]
    assert row["latency_s"] is None


def test_is_oom_does_not_swallow_other_runtime_errors():
    assert is_oom(RuntimeError("CUDA out of memory."))
    assert not is_oom(RuntimeError("shape mismatch"))


def test_exception_becomes_an_error_row_with_stage():
    row = measure_cell(cell("t_raise"), FAST, RUN).to_dict()
    assert row["status"] == "error"
    assert row["reason"] == "during accuracy: ValueError: boom"


def test_nan_output_becomes_nonfinite():
    row = measure_cell(cell("t_nan", N=32), FAST, RUN).to_dict()
    assert row["status"] == "nonfinite"
    assert row["reason"] == f"output has {B * H * 32 * D} NaN and 0 inf values of {B * H * 32 * D}"


def test_unsupported_row_carries_the_variants_reasons():
    row = measure_cell(cell("t_nocausal", causal=True), FAST, RUN).to_dict()
    assert row["status"] == "unsupported"
    assert row["reason"] == "does not support causal=True"


def test_per_cell_limit_becomes_a_timeout_row():
    settings = MeasureSettings(time_budget_s=0.01, repeats=1, error_rows=8, cell_timeout_s=0.3)
    row = measure_cell(cell("t_sleep", N=16, config={"seconds": 0.2}), settings, RUN).to_dict()
    assert row["status"] == "timeout"
    assert row["wall_s"] < 2


@pytest.mark.parametrize("status", ["ok", "fit_timeout"])
@pytest.mark.slow
def test_calibration_runs_on_its_own_clock(monkeypatch, status):
    """A calibration longer than the cell's limit is not a timeout (its time is not the cell's); past fit_timeout_s it
    is a fit_timeout row whose reason says so, never a timeout that reads as the variant hanging."""
    import importlib
    import time

    from tests.helpers.load import load_scaled

    module = importlib.import_module("variants.calibrate")
    real = module.calibrate
    cell_limit = load_scaled(2.0)  # the cell's own stages (inputs, timing, errors) fit it, on a busy machine too
    nap = cell_limit + 1.0  # the calibration alone outlasts the cell's limit

    def slow(*args, **kwargs):
        time.sleep(nap)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "calibrate", slow)
    fit_timeout_s = nap + load_scaled(30.0) if status == "ok" else 1.0
    settings = dataclasses.replace(FAST, cell_timeout_s=cell_limit, fit_timeout_s=fit_timeout_s)
    row = measure_cell(cell("t_learn", N=32, seed=7), settings, RUN).to_dict()
    assert row["status"] == status, row["reason"]
    if status == "fit_timeout":
        assert "calibration ran past its own limit of 1 s (fit_timeout_s)" in row["reason"]


def test_prepare_hook_runs_outside_timing_and_is_recorded():
    from variants import get_variant

    cls = get_variant("t_prepare").cls
    before = cls.prepared
    row = measure_cell(cell("t_prepare"), FAST, RUN).to_dict()
    assert row["status"] == "ok"
    assert row["setup_s"] == 1.5
    assert cls.prepared == before + 1  # once per cell, not once per timed call


def test_learnable_variant_is_calibrated_on_other_seeds(monkeypatch):
    import importlib

    calibrate_module = importlib.import_module("variants.calibrate")  # the module (the package exports the function)
    seen, held = [], []
    real = calibrate_module.calibrate

    def spy(variant, batches, **kwargs):
        seen.extend(batches)
        held.extend(kwargs["heldout"])
        return real(variant, batches, **kwargs)

    monkeypatch.setattr(calibrate_module, "calibrate", spy)
    context = MeasureContext()
    c = cell("t_learn", N=32, seed=5)
    row = measure_cell(c, FAST, RUN, context).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert row["calibration_s"] > 0
    assert row["calibration"]["steps"] == 20 and row["calibration"]["loss_after"] < row["calibration"]["loss_before"]
    q_eval = context.get_inputs(c, torch.device("cpu"))[0]
    assert len(seen) == 2 and not any(torch.equal(q, q_eval) for q, _, _ in seen + held)
    # held-out seeds: neither a calibration batch nor the evaluation's; the fit's errors on both are in the row
    assert len(held) == 4 and not any(torch.equal(h[0], q) for h in held for q, _, _ in seen)
    assert 0 < row["calibration_train_error"] < 2 and 0 < row["calibration_heldout_error"] < 2
    # The train-mode cell of the same series reuses the fit: no second calibration.
    again = measure_cell(cell("t_learn", N=32, seed=5, mode="train"), FAST, RUN, context).to_dict()
    assert len(seen) == 2 and again["calibration"] == row["calibration"]


def test_accuracy_reference_full_vs_pattern():
    from variants import list_variants

    if "sliding_window" not in list_variants():
        pytest.skip("sliding_window not registered")
    c = cell("sliding_window", N=128, config={"window": 16})
    full = measure_cell(c, FAST, RUN).to_dict()
    own = measure_cell(c, MeasureSettings(**{**FAST.to_dict(), "accuracy_reference": "pattern"}), RUN).to_dict()
    assert own["rel_l2_error"] < 1e-5 < full["rel_l2_error"]


def test_sampled_rows_include_first_and_last():
    rows = sample_rows(1000, 16, seed=0)
    assert len(rows) == 16 and rows[0] == 0 and rows[-1] == 999
    assert torch.equal(rows, rows.unique())  # sorted, no repeats
    assert torch.equal(sample_rows(10, 16, seed=0), torch.arange(10))


@pytest.mark.parametrize(
    "variant,mode,returned",
    [
        (
            "t_oneheaded",
            "forward",
            r"returned shape \(1, 1, 32, 16\), torch.float32 on cpu",
        ),  # broadcasts: was recorded ok
        ("t_oneheaded", "train", r"returned shape \(1, 1, 32, 16\), torch.float32 on cpu"),
        ("t_float64", "forward", r"returned shape \(1, 2, 32, 16\), torch.float64 on cpu"),  # was ok
        ("t_rowshort", "forward", r"returned shape \(1, 2, 31, 16\), torch.float32 on cpu"),  # was an IndexError
        ("t_tuple", "forward", r"returned a tuple"),
    ],
)
def test_an_output_of_the_wrong_shape_dtype_or_type_is_an_error_row_saying_both(variant, mode, returned):
    row = measure_cell(cell(variant, N=32, mode=mode), FAST, RUN).to_dict()
    assert row["status"] == "error"
    assert re.search(
        rf"during accuracy: BadOutput: the variant {returned}.*; expected a tensor of shape \(1, 2, 32, 16\), "
        r"torch.float32 on cpu",
        row["reason"],
    ), row["reason"]
    assert row["latency_s"] is None and row["rel_l2_error"] is None


def test_a_system_exit_inside_a_variant_is_an_error_row():
    row = measure_cell(cell("t_exit", N=32), FAST, RUN).to_dict()
    assert row["status"] == "error" and row["reason"] == "during accuracy: SystemExit: 3", row["reason"]


def test_a_plain_not_supported_error_from_a_plugin_is_an_unsupported_row_with_its_message():
    row = measure_cell(cell("t_refuse", causal=True), FAST, RUN).to_dict()
    assert row["status"] == "unsupported" and row["reason"] == "causal not implemented"
    assert measure_cell(cell("t_refuse"), FAST, RUN).status == "ok"


@pytest.mark.parametrize("slow", [False, True])
def test_the_timer_makes_at_least_repeats_calls_even_past_its_budget(slow):
    """--repeats is a minimum: a step slower than the budget is still timed `repeats` times (median of many, not one)."""
    from harness.measure.timer import StepTimer

    calls = []
    measured = StepTimer("cpu").measure(lambda: calls.append(1), budget_s=0.001, repeats=12, first_call_s=slow * 1.0)
    times, n = measured.times, measured.repeats
    assert n >= 12 and len(times) >= 1
    assert len(calls) >= 12  # timed calls really happened
    if slow:  # one call per block: every one of the `repeats` calls has its own time, and no untimed call between
        assert n == len(times) == 12 and len(calls) == 12


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_cells_are_paired_with_dense_auto_but_dense_auto_is_not(mode):
    context = MeasureContext()
    dense = measure_cell(cell(N=64, mode=mode), FAST, RUN, context).to_dict()
    assert dense["status"] == "ok" and dense["speedup"] is None and dense["baseline_latency_s"] is None
    assert list(context.baseline_call_s.values()) == [
        dense["latency_s"]
    ]  # its warm time spares the next cell a warm-up
    assert dense["noisy"] in (True, False) and (dense["load_per_cpu"] is None or dense["load_per_cpu"] >= 0)
    for row in (
        measure_cell(cell("sliding_window", N=64, mode=mode), FAST, RUN, context).to_dict(),
        measure_cell(cell(N=64, mode=mode, config={"backend": "reference"}), FAST, RUN, context).to_dict(),
    ):
        assert row["status"] == "ok", row["reason"]
        assert 0 < row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
        assert row["baseline_latency_s"] > 0 and row["repeats"] >= FAST.repeats
    failed = measure_cell(cell(N=64, inputs="nope"), FAST, RUN)  # not timed: no noise verdict
    assert failed.status == "error" and failed.noisy is None


def test_a_failed_cell_keeps_what_its_earlier_stages_measured():
    row = measure_cell(cell("t_oneheaded", N=32), FAST, RUN)  # fails in the accuracy stage (its output has one head)
    assert row.status == "error" and row.reason.startswith("during accuracy:")
    assert row.backend is not None  # from the build stage, which finished
