"""harness.report.heatmaps (the winner map): what a cell and the legend say (the data, not the pixels)."""

from __future__ import annotations

from matplotlib.patches import Patch

from harness.report.heatmaps import _cell_text, legend_handles
from tests.helpers.synthetic_run import BUDGET_SPEC, analysed_rows, make_budget_rows


def _tables(timeout_at: int):
    rows = make_budget_rows(inputs=("gaussian",))
    for r in rows:
        if r["seq_len"] == timeout_at:  # dense and every candidate timed out
            r.update(status="timeout", latency_s=None, speedup=None, rel_l2_error=None)
    return list(analysed_rows(rows, spec_text=BUDGET_SPEC).tables)


def test_a_grey_cell_says_dense_timed_out_and_the_legend_explains_the_marks():
    tables = _tables(8192)
    picks = tables[0].picks
    assert _cell_text(picks[(8192, 0.1)]) == "none ran\ndense timed out"
    assert picks[(1024, 0.05)].tie and _cell_text(picks[(1024, 0.05)]) == "dense~"
    labels = [
        h.get_label()
        for h in legend_handles(tables, {v: "red" for v in ("dense", "linformer", "sliding_window")}, Patch)
    ]
    assert labels == ["dense", "linformer", "sliding_window", "none within budget ran", "~ a tie: intervals overlap"]
