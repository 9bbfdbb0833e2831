"""compare when a run-wide drift and a real change happen together: the drift is the noise floor, the change still
stands out of it, and nothing else is blamed."""

from __future__ import annotations

import pytest

from harness.commands import main
from harness.report.analysed import analyse as load_run
from harness.report.compare import compare_runs
from tests.harness.report.test_compare import _scattered
from tests.helpers.synthetic_run import make_rows, write_run


@pytest.mark.parametrize("drift", [0.7, 1.0, 1.3])
@pytest.mark.slow
def test_a_real_slowdown_stands_out_of_a_run_wide_drift(tmp_path, drift):
    a = load_run(write_run(tmp_path / "a", _scattered(make_rows(), spread=0.05, seed=1)))
    b = load_run(
        write_run(tmp_path / "b", _scattered(make_rows(), spread=0.05, seed=2, drift=drift, slow={"chunked": 3.0}))
    )
    result = compare_runs(a, b)
    chunked_ok = result.cells[(result.cells["variant"] == "chunked") & (result.cells["status_a"] == "ok")]
    assert set(result.regressions["variant"]) == {"chunked"} and len(result.regressions) == len(chunked_ok)
    assert len(result.improvements) == 0  # a drift to 0.7x is the machine, not every other variant improving
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1


def test_a_drift_alone_as_large_as_the_change_is_no_regression(tmp_path):
    a = load_run(write_run(tmp_path / "a", _scattered(make_rows(), spread=0.05, seed=1)))
    b = load_run(write_run(tmp_path / "b", _scattered(make_rows(), spread=0.05, seed=2, drift=1.5)))
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and len(result.improvements) == 0
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0
