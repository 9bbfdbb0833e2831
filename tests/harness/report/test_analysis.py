"""harness.report.analysis: exponent fit, crossover finder, dense ratios, Pareto front (the answer: test_choice.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.report.analysis import pareto_front, with_dense_ratios
from harness.report.lengths import memory_limits
from harness.report.scaling import crossover_length, crossovers, fit_exponent, scaling_exponents
from harness.store import rows_frame
from tests.helpers.synthetic_run import make_rows

N = np.array([256, 512, 1024, 2048, 4096, 8192, 16384])


@pytest.mark.parametrize("exponent", [1.0, 1.5, 2.0, 3.0])
def test_fit_recovers_planted_exponent_despite_overhead_at_short_lengths(exponent):
    rng = np.random.default_rng(0)
    # A fixed overhead dominates the short lengths; the fit over the longest ones must not see it.
    t = 1e-9 * (256**exponent + N**exponent) * (1 + 0.01 * rng.standard_normal(len(N)))
    assert fit_exponent(N, t, last=3) == pytest.approx(exponent, abs=0.06)
    # Over all points, the overhead drags the slope down: the choice of "longest lengths" matters.
    assert fit_exponent(N, t, last=0) < exponent - 0.1


def test_fit_needs_two_positive_points():
    assert math.isnan(fit_exponent([1024], [1.0]))
    assert math.isnan(fit_exponent([512, 1024], [0.0, float("nan")]))
    assert fit_exponent([512, 1024, 2048], [1.0, 2.0, None]) == pytest.approx(1.0)


def test_crossover_of_two_power_laws_is_exact():
    dense = 1e-9 * N**2.0
    linear = 4e-7 * N**1.0  # equal at N = 400
    result = crossover_length(N, linear, dense)
    assert result.kind == "crosses"
    assert result.length == pytest.approx(400.0, rel=1e-9)


def test_crossover_kinds():
    dense = 1e-9 * N**2.0
    assert crossover_length(N, 1e-8 * N, dense).kind == "always"  # equal at N = 10 < 256
    assert crossover_length(N, 1.5 * dense, dense).kind == "never"
    assert crossover_length([], [], []).kind == "no data"
    # Faster in the middle, slower again at the longest N: not a crossover.
    assert crossover_length([1, 2, 3], [2.0, 0.5, 2.0], [1.0, 1.0, 1.0]).kind == "never"
    # Missing points are ignored; the crossing between 2 and 4 of ratios 2 and 0.5 is at N = 2*sqrt(2).
    result = crossover_length([1, 2, 3, 4], [4.0, 2.0, None, 0.5], [1.0, 1.0, 1.0, 1.0])
    assert result.kind == "crosses" and result.length == pytest.approx(2 * math.sqrt(2))


def test_dense_ratios_use_the_dense_row_of_the_same_cell():
    frame = with_dense_ratios(rows_frame(make_rows()))
    sw = frame[(frame["variant"] == "sliding_window") & (frame["seq_len"] == 4096) & (frame["inputs"] == "local")].iloc[
        0
    ]
    assert sw["dense_speedup"] == pytest.approx((1e-9 * 4096**2) / (4e-7 * 4096))
    assert sw["memory_ratio"] == pytest.approx(2048 * 4096 / (8 * 4096**2))
    dense = frame[(frame["variant"] == "dense") & (frame["status"] == "ok")]
    assert np.allclose(dense["dense_speedup"], 1.0)
    # Where dense ran out of memory there is no ratio, and the reason is kept.
    at_oom = frame[(frame["variant"] == "chunked") & (frame["seq_len"] == 8192)]
    assert at_oom["dense_speedup"].isna().all() and set(at_oom["dense_status"]) == {"oom"}


def test_dense_baseline_prefers_backend_auto_over_a_faster_explicit_backend():
    rows = make_rows(variants=("dense", "sliding_window"), inputs=("gaussian",), with_failures=False)
    fast = [
        dict(r, config={"backend": "reference"}, latency_s=r["latency_s"] / 10) for r in rows if r["variant"] == "dense"
    ]
    frame = with_dense_ratios(rows_frame(rows + fast))
    sw = frame[(frame["variant"] == "sliding_window") & (frame["seq_len"] == 1024)].iloc[0]
    assert sw["dense_latency_s"] == pytest.approx(1e-9 * 1024**2)
    assert set(frame[frame["variant"] == "dense"]["series"]) == {"dense(backend=auto)", "dense(backend=reference)"}


def test_scaling_exponents_and_crossovers_on_a_synthetic_run():
    frame = with_dense_ratios(rows_frame(make_rows()))
    frame = frame[~frame["causal"]]  # the causal setting holds only linformer's unsupported row
    exps = scaling_exponents(frame).set_index("series")
    assert exps.loc["dense", "time_exponent"] == pytest.approx(2.0)
    assert exps.loc["dense", "fit_to"] == 4096  # 8192 ran out of memory
    assert exps.loc["sliding_window", "time_exponent"] == pytest.approx(1.0)
    assert exps.loc["chunked", "memory_exponent"] == pytest.approx(1.0)
    cross = crossovers(frame).set_index("series")
    assert cross.loc["sliding_window", "kind"] == "crosses"
    assert cross.loc["sliding_window", "length"] == pytest.approx(400.0)
    assert cross.loc["linformer", "kind"] == "always"
    assert cross.loc["chunked", "kind"] == "never"
    assert cross.loc["chunked", "dense_oom_from"] == 8192


def test_pareto_front_keeps_only_non_dominated_points():
    points = pd.DataFrame({"t": [1.0, 2.0, 3.0, 1.5, 4.0], "e": [0.5, 0.1, 0.01, 0.6, 0.01], "name": list("abcde")})
    assert list(pareto_front(points, "t", "e")["name"]) == ["a", "b", "c"]
    with_nan = pd.concat([points, pd.DataFrame({"t": [0.1], "e": [float("nan")], "name": ["f"]})])
    assert "f" not in set(pareto_front(with_nan, "t", "e")["name"])


def test_memory_limits():
    frame = rows_frame(make_rows())
    limits = memory_limits(frame[~frame["causal"]]).set_index("series")
    assert limits.loc["dense", "longest_ok"] == 4096 and limits.loc["dense", "first_oom"] == 8192
    assert limits.loc["chunked", "longest_ok"] == 8192 and pd.isna(limits.loc["chunked", "first_oom"])


def test_a_fit_stops_at_a_series_first_failure_and_a_crossover_names_its_longest_shared_n():
    rows = [r for r in make_rows(inputs=("gaussian",)) if not r["causal"] and r["variant"] in ("dense", "linformer")]
    for r in rows:
        if r["variant"] == "linformer" and r["seq_len"] == 2048:  # a timeout between ok lengths (a loaded moment)
            r.update(status="timeout", latency_s=None, peak_memory_bytes=None, speedup=None)
        if r["variant"] == "linformer" and r["seq_len"] == 4096:  # ran, but measured under other conditions
            r.update(latency_s=r["latency_s"] / 50)
    frame = with_dense_ratios(rows_frame(rows))
    exps = scaling_exponents(frame).set_index("series")
    assert exps.loc["linformer", "fit_to"] == 1024 and exps.loc["linformer", "stopped_at"] == 2048
    assert exps.loc["linformer", "stopped_status"] == "timeout"
    assert exps.loc["linformer", "time_exponent"] == pytest.approx(1.0)
    assert exps.loc["dense", "stopped_status"] == "oom" and exps.loc["dense", "fit_to"] == 4096
    cross = crossovers(frame).set_index("series")
    assert cross.loc["linformer", "longest"] == 4096  # dense ran out of memory at 8K: nothing claimed beyond 4K


def test_an_exact_variant_slower_than_dense_with_a_rounding_error_below_it_is_not_on_the_front():
    from harness.report.tradeoffs import rounding_floor

    points = pd.DataFrame(
        {
            "series": ["dense", "chunked", "sliding_window", "linformer"],
            "latency": [1.0, 2.0, 0.5, 3.0],
            "error": [3.4e-7, 2.9e-7, 0.04, 0.02],
        }
    )
    assert list(pareto_front(points, "latency", "error")["series"]) == ["sliding_window", "dense", "chunked"]
    floor = rounding_floor(points)
    assert floor == pytest.approx(4 * 3.4e-7)
    assert list(pareto_front(points, "latency", "error", same_below=floor)["series"]) == ["sliding_window", "dense"]
