"""compare on a basis that cancels the machine (harness.report.normalize): paired speed-ups for the variants, the
baseline's own cells paired with the reference kernel; a planted drift that both cancel, a planted baseline regression
that drift removal alone would hide, and the ratios and the floor by their values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.report.analysed import analyse as load_run
from harness.report.compare import compare_runs, summary_lines
from harness.report.normalize import TimeRatio, time_ratio
from harness.report.verdicts import NOISE_SIGMAS, noise_floor
from tests.helpers.synthetic_run import make_rows, write_run

SPEEDUPS = {"chunked": 0.7, "sliding_window": 2.0, "linformer": 3.0, "dense": 0.25}  # dense's: over the reference


def _run(folder, *, latency: float = 1.0, paired: bool = True, speedup=None, load: float = 0.1, wide: bool = False):
    """A synthetic run: every latency times `latency`. `paired`: every variant has SPEEDUPS' paired speed-up (interval
    +/- 5%) times `speedup`'s factor for it (dense's is over the reference kernel); else no paired fields (older
    rows). `load` per CPU on every row; `wide`: every row flagged noisy for its interval's width alone."""
    rows = make_rows()
    for r in rows:
        if r["status"] != "ok":
            continue
        for key in ("latency_s", "latency_p20_s", "latency_p80_s"):
            r[key] *= latency
        s = SPEEDUPS[r["variant"]] * (speedup or {}).get(r["variant"], 1.0)
        prefix = "reference_" if r["variant"] == "dense" else ""
        if paired:
            r.update({f"{prefix}speedup": s, f"{prefix}speedup_low": s * 0.95, f"{prefix}speedup_high": s * 1.05})
            r.update(rounds=4)
        r.update(load_per_cpu=load, noisy=wide, noise_reason="speed-up interval wide" if wide else None)
    return load_run(write_run(folder, rows))


def test_a_machine_drift_both_pairings_cancel(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", latency=0.7)  # the whole machine 0.7x: absolute latencies move, paired ratios do not
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and len(result.improvements) == 0
    ok = result.cells[result.cells["status_a"] == "ok"]
    assert set(ok["time_basis"]) == {"speedup", "reference"}
    assert np.allclose(ok["time_ratio"], 1.0) and np.allclose(ok["latency_ratio"], 0.7)  # absolute kept beside
    assert result.floor.spread == pytest.approx(0.0) and result.floor.drift == 1.0
    assert any("10 by their paired speed-up over the reference kernel" in n for n in result.notes)
    lines = summary_lines(result, a, b)
    assert "  chunked                          0.70x over 12 cells; 1.00x inside the cells" in lines


def test_a_baseline_regression_that_drift_removal_would_hide_is_found(tmp_path):
    # every cell 1.3x slower, the reference kernel not (dense, and every variant with it, got slower: a change in the
    # path they share): dense's speed-up over the reference fell 1.3x, the variants' over dense did not move
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", latency=1.3, speedup={"dense": 1 / 1.3})
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"dense"} and len(result.regressions) == 10
    assert set(result.regressions["why"]) == {"latency 1.30x against the reference kernel in the cell"}
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1
    # the same runs without paired fields (older rows): the run-wide drift taken out hides it
    a, b = _run(tmp_path / "c", paired=False), _run(tmp_path / "d", latency=1.3, paired=False)
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and result.floor.drift == pytest.approx(1.3)


def test_a_variant_slower_against_its_own_baseline_is_found_through_a_drift(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", latency=1.25, speedup={"chunked": 1 / 1.4})
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"chunked"} and len(result.regressions) == 12
    assert set(result.regressions["why"]) == {"latency 1.40x against dense in the cell"}


def test_time_ratio_by_value():
    row = pd.Series({"speedup_a": 0.7, "speedup_b": 0.5, "latency_s_a": 1.0, "latency_s_b": 9.0})
    assert time_ratio(row) == TimeRatio(pytest.approx(1.4), "speedup")
    row = pd.Series({"reference_speedup_a": 0.3, "reference_speedup_b": 0.24, "latency_s_a": 1e-3, "latency_s_b": 1})
    assert time_ratio(row) == TimeRatio(pytest.approx(1.25), "reference")
    row = pd.Series({"speedup_a": None, "speedup_b": 0.5, "latency_s_a": 1e-3, "latency_s_b": 1.5e-3})
    assert time_ratio(row) == TimeRatio(pytest.approx(1.5), "latency")
    assert time_ratio(pd.Series({"latency_s_a": 1e-3, "latency_s_b": float("nan")})) is None


def test_the_floor_is_the_paired_scatter_not_the_absolute_one():
    """Ten paired cells whose speed-up ratios are e^(+/-0.05) around 1 and whose latencies moved 0.6-1.4x: the floor is
    NOISE_SIGMAS x 1.4826 x 0.05, not the latencies' scatter."""
    logs = [0.05, -0.05] * 5
    moved = np.linspace(0.6, 1.4, 10)
    cells = pd.DataFrame(
        {
            "status_a": "ok",
            "status_b": "ok",
            "speedup_a": 1.0,
            "speedup_b": [math.exp(-x) for x in logs],
            "latency_s_a": 1e-3,
            "latency_s_b": 1e-3 * moved,
        }
    )
    floor = noise_floor(cells)
    assert floor.drift == 1.0 and floor.cells == 10
    assert floor.spread == pytest.approx(1.4826 * 0.05)
    assert floor.limit(0.05) == pytest.approx(NOISE_SIGMAS * 1.4826 * 0.05)


def test_a_wide_interval_is_priced_in_but_load_is_not(tmp_path):
    """A paired change beyond both rows' intervals is a regression even where the rows are flagged noisy for their
    intervals' width (the intervals are what it cleared); under load it is the machine's: noisy, not counted."""
    a = _run(tmp_path / "a", wide=True)
    result = compare_runs(a, _run(tmp_path / "b", wide=True, speedup={"chunked": 1 / 1.4}))
    assert set(result.regressions["variant"]) == {"chunked"} and len(result.noisy) == 0
    result = compare_runs(a, _run(tmp_path / "c", load=1.5, speedup={"chunked": 1 / 1.4}))
    assert len(result.regressions) == 0 and set(result.noisy["variant"]) == {"chunked"}
    assert set(result.noisy["why"]) == {
        "latency 1.40x against dense in the cell, but measured under load or noisy (B: load 1.50 per CPU)"
    }
