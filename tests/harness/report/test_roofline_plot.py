"""harness.report.tradeoffs (the roofline): ok rows placed by intensity and achieved FLOP/s under the measured ceilings."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.tradeoffs import has_roofline, plot_roofline, roofline_points

ENV = {"limits": {"dtypes": {"float32": {"peak_flops": 1e10, "bandwidth_bytes_per_s": 2e9}}}}


def _frame() -> pd.DataFrame:
    rows = [
        dict(variant="dense", phase="prefill", dtype="float32", status="ok", latency_s=0.01, impossible=None),
        dict(variant="dense", phase="decode", dtype="float32", status="ok", latency_s=0.001, impossible=None),
        dict(variant="sliding_window", phase="prefill", dtype="float32", status="oom", latency_s=None, impossible=None),
    ]
    frame = pd.DataFrame(rows)
    frame["flops"] = [1e8, 1e5, None]
    frame["bytes_moved"] = [1e6, 1e6, None]
    return frame


def test_points_are_intensity_and_achieved_flops_of_ok_rows():
    points = roofline_points(_frame())
    assert list(points["intensity"]) == pytest.approx([100.0, 0.1])
    assert list(points["achieved"]) == pytest.approx([1e10, 1e8])


def test_the_figure_is_drawn_only_with_limits(tmp_path):
    assert has_roofline(_frame(), ENV) and not has_roofline(_frame(), {})
    path = plot_roofline(_frame(), ENV, tmp_path / "roofline.png")
    assert path.is_file() and path.stat().st_size > 1000
    assert plot_roofline(_frame(), {}, tmp_path / "none.png") is None
