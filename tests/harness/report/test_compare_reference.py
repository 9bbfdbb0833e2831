"""compare on a basis that cancels the machine (harness.report.normalize): paired speed-ups for the variants, latency
over each run's reference kernel for the baseline; a planted drift that the reference cancels, a planted baseline
regression that drift removal alone would hide, and the ratios and the floor by their values."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.report.analysed import analyse as load_run
from harness.report.compare import compare_runs
from harness.report.normalize import TimeRatio, time_ratio
from harness.report.verdicts import NOISE_SIGMAS, noise_floor
from tests.helpers.synthetic_run import make_rows, write_run

SPEEDUPS = {"chunked": 0.7, "sliding_window": 2.0, "linformer": 3.0}


def _run(folder, *, latency: float = 1.0, dense: float = 1.0, reference_s: float | None = 1e-3, speedup=None):
    """A synthetic run: every latency times `latency` (the machine), dense's times `dense` more (the code); every
    other variant paired, its speed-up SPEEDUPS' (interval +/- 5%) times `speedup`'s factor for that variant."""
    rows = make_rows(slow={"dense": dense})
    for r in rows:
        if r["status"] != "ok":
            continue
        for key in ("latency_s", "latency_p20_s", "latency_p80_s"):
            r[key] *= latency
        if r["variant"] in SPEEDUPS:
            s = SPEEDUPS[r["variant"]] * (speedup or {}).get(r["variant"], 1.0)
            r.update(speedup=s, speedup_low=s * 0.95, speedup_high=s * 1.05, rounds=4, load_per_cpu=0.1)
    path = write_run(folder, rows)
    if reference_s is not None:
        env = json.loads((path / "env.json").read_text())
        env["reference"] = {"kernel": "synthetic", "seconds": reference_s}
        (path / "env.json").write_text(json.dumps(env))
    return load_run(path)


def test_a_machine_drift_the_reference_kernel_shares_cancels(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", latency=0.7, reference_s=0.7e-3)  # the whole machine 0.7x, the reference too
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and len(result.improvements) == 0
    ok = result.cells[result.cells["status_a"] == "ok"]
    assert set(ok["time_basis"]) == {"speedup", "reference"}
    assert np.allclose(ok["time_ratio"], 1.0) and np.allclose(ok["latency_ratio"], 0.7)  # absolute kept beside
    assert result.floor.spread == pytest.approx(0.0) and result.floor.drift == 1.0
    assert any("10 by latency over each run's reference kernel" in n for n in result.notes)


def test_a_baseline_regression_that_drift_removal_would_hide_is_found(tmp_path):
    # dense 1.3x slower, the reference not: found on the reference basis; the variants' paired speed-ups rose 1.3x
    # with it (they are against dense), which is dense's change, not theirs: said as improvements of the ratio
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", dense=1.3, speedup={v: 1.3 for v in SPEEDUPS})
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"dense"} and len(result.regressions) == 10
    assert set(result.regressions["why"]) == {"latency 1.30x against the run's reference kernel"}
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1
    # the same runs without reference kernels (older runs): dense's cells are all raw latency, drift = 1.3, hidden
    a, b = _run(tmp_path / "c", reference_s=None), _run(tmp_path / "d", dense=1.3, reference_s=None)
    assert len(compare_runs(a, b).regressions) == 0


def test_a_variant_slower_against_its_own_baseline_is_found_through_a_drift(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", latency=1.25, reference_s=1.25e-3, speedup={"chunked": 1 / 1.4})
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"chunked"} and len(result.regressions) == 12
    assert set(result.regressions["why"]) == {"latency 1.40x against dense in the cell"}


def test_time_ratio_by_value():
    row = pd.Series({"speedup_a": 0.7, "speedup_b": 0.5, "latency_s_a": 1.0, "latency_s_b": 9.0})
    assert time_ratio(row) == TimeRatio(pytest.approx(1.4), "speedup")
    row = pd.Series({"speedup_a": None, "speedup_b": 0.5, "latency_s_a": 1e-3, "latency_s_b": 1.5e-3})
    assert time_ratio(row, (1e-4, 1.2e-4)) == TimeRatio(pytest.approx(1.25), "reference", pytest.approx(1 / 1.2))
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
