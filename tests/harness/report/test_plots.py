"""harness.report.plotting: one colour per variant, one style per config."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report import curves, figures, lengths, maps_plot, plotting, tradeoffs
from harness.report.analysis import with_budgets, with_dense_ratios
from harness.report.lengths import memory_limits
from harness.report.maps import MapPanel, MapSet
from harness.report.plotting import series_styles, variant_colors
from harness.store import rows_frame
from tests.helpers.synthetic_run import SPREAD, analysed_rows, make_rows


def test_one_colour_per_variant_in_every_figure():
    colors = variant_colors(["zeta", "dense", "alpha", "chunked"])
    assert colors["dense"] == "black" and colors["alpha"] != colors["zeta"]
    assert variant_colors(["alpha", "zeta"]) == {k: colors[k] for k in ("alpha", "zeta")}  # independent of who else ran
    frame = rows_frame(
        [dict(r, config={"window": w}) for w in (64, 128) for r in make_rows(variants=("sliding_window",))]
        + make_rows(variants=("dense",))
    )
    styles = series_styles(frame)
    assert styles["sliding_window(window=64)"]["color"] == styles["sliding_window(window=128)"]["color"]
    assert styles["sliding_window(window=64)"]["linestyle"] != styles["sliding_window(window=128)"]["linestyle"]


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plots save, by file name, kept open for inspection until the test ends (written at low dpi)."""
    figures = {}

    def keep(plt, fig, path):
        figures[path.name] = fig
        fig.savefig(path, dpi=20)

    monkeypatch.setattr(plotting, "save", keep)
    yield figures
    for fig in figures.values():
        plotting.pyplot().close(fig)


def frame_of(rows, budgets=(0.01, 0.1), metric="rel_l2"):
    return with_budgets(with_dense_ratios(rows_frame(rows)), budgets, metric)


def legend_labels(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_the_out_of_memory_entry_only_where_a_cross_is_drawn(tmp_path, drawn):
    with_oom = frame_of(make_rows(inputs=("gaussian",)))
    curves.plot_metric_vs_n(with_oom, "latency_s", tmp_path / "a.png", ylabel="t", title="t")
    assert "out of memory" in legend_labels(drawn["a.png"])
    without = frame_of(make_rows(inputs=("gaussian",), with_failures=False))
    curves.plot_metric_vs_n(without, "latency_s", tmp_path / "b.png", ylabel="t", title="t")
    assert "out of memory" not in legend_labels(drawn["b.png"]) and "dense" in legend_labels(drawn["b.png"])


@pytest.mark.slow
def test_max_length_only_when_a_cell_ran_out_of_memory_or_timed_out(tmp_path):
    rows = make_rows(inputs=("gaussian",), with_failures=False)  # rows as read: a frame's NaN records are not rows
    clean = frame_of(rows)
    assert lengths.plot_memory_limits(memory_limits(clean), clean, tmp_path / "m.png") is None
    assert not (tmp_path / "m.png").exists()
    errored = frame_of([dict(r, status="error") if r["seq_len"] == 8192 else r for r in rows])
    assert (
        lengths.plot_memory_limits(memory_limits(errored), errored, tmp_path / "m.png") is None
    )  # an error is no limit
    for status in ("oom", "timeout"):
        hit = frame_of(
            [dict(r, status=status) if r["seq_len"] == 8192 and r["variant"] == "dense" else r for r in rows]
        )
        assert (
            lengths.plot_memory_limits(memory_limits(hit), hit, tmp_path / f"{status}.png")
            == tmp_path / f"{status}.png"
        )
    paths, blocks = figures.figure_section(
        analysed_rows(make_rows(inputs=("gaussian",), with_failures=False)), tmp_path, "measured"
    )
    assert "max_length.png" not in {p.name for p in paths} and "latency_vs_n.png" in {p.name for p in paths}
    assert not any(getattr(b, "file", None) == "max_length.png" for b in blocks)


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]


def test_latency_bands_span_p20_to_p80_where_measured(tmp_path, drawn):
    rows = make_rows(inputs=("gaussian",), with_failures=False)
    rows = [dict(r, latency_p20_s=None, latency_p80_s=None) if r["variant"] == "chunked" else r for r in rows]
    curves.plot_metric_vs_n(
        frame_of(rows), "latency_s", tmp_path / "l.png", ylabel="t", title="t", band=("latency_p20_s", "latency_p80_s")
    )
    (ax,) = visible_axes(drawn["l.png"])
    bands = [c for c in ax.collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
    assert len(bands) == 3  # dense, linformer, sliding_window; chunked has no percentiles
    dense = next(b for b in bands if b.get_facecolor()[0][:3].sum() == 0)  # black
    ys = dense.get_paths()[0].vertices[:, 1]
    t = 1e-9 * 256**2
    assert np.isclose(ys.min(), t * (1 - SPREAD)) and np.isclose(ys.max(), (1e-9 * 8192**2) * (1 + SPREAD))


def test_a_series_outside_every_budget_is_faded_and_labelled_so(tmp_path, drawn):
    frame = frame_of(make_rows(inputs=("gaussian",)))  # sliding_window's error 0.3 is above the largest budget 0.1
    curves.plot_metric_vs_n(frame, "dense_speedup", tmp_path / "s.png", ylabel="x", title="x")
    labels = legend_labels(drawn["s.png"])
    assert (
        [l for l in labels if l.endswith(plotting.OUTSIDE_LABEL)]
        == [l for l in labels if l.startswith("sliding_window")]
        != []
    )
    (ax,) = visible_axes(drawn["s.png"])
    faded = [line for line in ax.get_lines() if line.get_label().endswith(plotting.OUTSIDE_LABEL)]
    assert (
        len(faded) == 1 and faded[0].get_alpha() == plotting.OUTSIDE_ALPHA and len(faded[0].get_xdata()) == 5
    )  # still drawn (no dense at 8K)
    wider = frame_of(make_rows(inputs=("gaussian",)), budgets=(0.5,))  # within a budget of 0.5: drawn as any other
    curves.plot_metric_vs_n(wider, "dense_speedup", tmp_path / "w.png", ylabel="x", title="x")
    assert not any(l.endswith(plotting.OUTSIDE_LABEL) for l in legend_labels(drawn["w.png"]))


@pytest.mark.slow
def test_pareto_one_panel_per_length_and_the_front_only_within_budget(tmp_path, drawn):
    # sliding_window is the fastest but outside the budget; linformer (0.05, within 0.1) is faster than dense from 1K
    frame = frame_of(make_rows(slow={"linformer": 2.5}))
    tradeoffs.plot_pareto(frame, tmp_path / "p.png", budgets=(0.01, 0.1), metric="rel_l2")
    panels = visible_axes(drawn["p.png"])
    assert [ax.get_title(loc="center") or ax.get_title(loc="left").split("\n")[-1] for ax in panels] == [
        f"N = {n}" for n in ("256", "512", "1K", "2K", "4K", "8K")
    ]
    for ax in panels:
        front = {c.get_label() for c in ax.collections if c.get_gid() == tradeoffs.FRONT_GID}
        outside = {c.get_label() for c in ax.collections if c.get_gid() == tradeoffs.OUTSIDE_GID}
        assert outside and all(l.startswith("sliding_window") for l in outside)
        assert front and not any(l.startswith("sliding_window") for l in front)
        on_front = sorted(c.get_offsets()[0][0] for c in ax.collections if c.get_gid() == tradeoffs.FRONT_GID)
        joined = [line.get_xdata() for line in ax.get_lines() if line.get_gid() == tradeoffs.FRONT_GID]
        assert sorted(set(joined[0])) == on_front if joined else len(on_front) == 1  # the line joins those points only
        budgets = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_gid() == plotting.BUDGET_GID)
        assert budgets == [0.01, 0.1]
    without = frame_of(make_rows(slow={"linformer": 2.5}), budgets=(0.5,))
    tradeoffs.plot_pareto(without, tmp_path / "q.png", budgets=(0.5,), metric="rel_l2")
    fronts = [
        {c.get_label() for c in ax.collections if c.get_gid() == tradeoffs.FRONT_GID}
        for ax in visible_axes(drawn["q.png"])
    ]
    assert all(
        any(l.startswith("sliding_window") for l in f) for f in fronts[1:]
    )  # within 0.5, fastest from N=512: on the front


def test_error_figure_draws_the_run_metric_and_its_budgets(tmp_path, drawn):
    frame = frame_of(make_rows(inputs=("gaussian",)), budgets=(1e-3, 0.2), metric="cosine")
    curves.plot_error_vs_n(frame, tmp_path / "e.png", budgets=(1e-3, 0.2), metric="cosine")
    (ax,) = visible_axes(drawn["e.png"])
    assert ax.get_ylabel() == "1 - cosine similarity"
    assert sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_gid() == plotting.BUDGET_GID) == [
        1e-3,
        0.2,
    ]
    assert {t.get_text() for t in ax.texts} == {"budget 1-cos 0.001", "budget 1-cos 0.2"}


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (
            200e3,
            150 * 2**20,
            ["256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB"],
        ),  # 10 powers of two: every second, 1 MiB among them
        (3000, 3 * 2**20, ["4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB"]),  # 2^12..2^21: every second from 2^12
        (2**30 / 3, 40 * 2**30, ["512 MiB", "1 GiB", "2 GiB", "4 GiB", "8 GiB", "16 GiB", "32 GiB"]),  # 7: all labelled
        (5 * 2**20, 7 * 2**20, ["5.92 MiB"]),  # no power of two in view: one label
    ],
)
def test_bytes_axis_labels_powers_of_two_with_the_unit_boundaries(low, high, expected):
    plt = plotting.pyplot()
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    plotting.bytes_axis(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
    assert labels == expected
    assert all(t.get_text() == "" for t in ax.yaxis.get_minorticklabels())
    plt.close(fig)


@pytest.mark.parametrize(
    "count, shape", [(1, (1, 1)), (4, (1, 4)), (5, (2, 3)), (6, (2, 3)), (8, (2, 4)), (9, (3, 3)), (10, (3, 4))]
)
def test_the_maps_grid_is_sized_to_the_maps(count, shape):
    rows, cols = maps_plot.map_grid(count)
    assert (rows, cols) == shape and rows * cols - count < rows  # never a whole empty column, at most one gap per row


def test_the_maps_figure_has_no_empty_panel(tmp_path, drawn):
    exact = np.eye(8)
    panels = [MapPanel(f"v{i}", np.eye(8), "", 0.0) for i in range(5)]
    maps_plot.plot_attention_maps(
        MapSet(exact, panels, n=8, inputs="gaussian", seed=0, causal=False, fitted=True), tmp_path / "maps.png"
    )
    images = [ax for ax in drawn["maps.png"].axes if ax.images]
    assert len(images) == 6 and len(drawn["maps.png"].axes) == 6 + 1  # 2 x 3 panels and the colour bar


def test_max_length_stops_a_series_at_a_timeout_on_any_input_and_names_a_series_that_never_ran():
    rows = make_rows(inputs=("gaussian", "local"), with_failures=False)
    for r in rows:
        if r["variant"] == "chunked" and r["seq_len"] == 8192 and r["inputs"] == "local":
            r.update(status="timeout")  # gaussian ran 8K ok: the timeout on local still stops it
        if r["variant"] == "linformer":
            r.update(status="unreachable" if r["seq_len"] == 256 else "not_run")
    frame = frame_of(rows)
    limits = memory_limits(frame[~frame["causal"]])
    by_series = limits.set_index("series")
    assert by_series.loc["chunked", "longest_ok"] == 4096 and by_series.loc["chunked", "failed_at"] == 8192
    assert lengths.max_length_text(by_series.loc["chunked"]) == "timeout at 8K"
    assert lengths.max_length_text(by_series.loc["linformer"]) == "never ran ok (unreachable at 256)"
    assert lengths.max_length_text(by_series.loc["dense"]) == "ran every N tried (to 8K)"
    left, right = lengths.max_length_axis(limits)
    assert left == 128 and right <= 1.5 * 8192  # the axis ends near the longest N tried


def _matched_rows():
    """Budget rows where sliding_window@0.1's window differs per N, and sliding_window and linformer met no budget on
    gaussian (their search's best errors ~0.7-0.8 recorded), and dense timed out at 8K."""
    from tests.helpers.synthetic_run import make_budget_rows

    rows = make_budget_rows(inputs=("gaussian", "local"))
    for r in rows:
        if r["variant"] == "sliding_window" and r["matched_budget"] == 0.1:
            w = {1024: 16, 2048: 152, 4096: 431, 8192: 600}[r["seq_len"]]
            r.update(config=dict(r["config"], window=w), tuning={"knob": "window", "high": w, "tried": {str(w): 0.09}})
        if r["inputs"] == "gaussian" and r["variant"] in ("sliding_window", "linformer"):
            tried = {"64": 0.7 + r["seq_len"] / 2e4, "16": float("inf")}
            r.update(status="unreachable", latency_s=None, rel_l2_error=None, speedup=None)
            r["tuning"] = {"knob": "k", "high": 64, "tried": tried}
        if r["variant"] == "dense" and r["seq_len"] == 8192:
            r.update(status="timeout", latency_s=None, rel_l2_error=None, speedup=None)
    return rows


def test_a_matched_series_whose_knob_differs_per_n_is_points_with_the_knob_not_a_line(tmp_path, drawn):
    frame = frame_of(_matched_rows(), budgets=(0.05, 0.1))
    local = frame[(frame["inputs"] == "local") & (frame["status"] == "ok")]
    knobs = curves.knob_labels(local[local["series"] == "sliding_window@0.1"])
    assert knobs == {1024: "window=16", 2048: "window=152", 4096: "window=431", 8192: "window=600"}
    assert curves.knob_labels(local[local["series"] == "sliding_window@0.05"]) == {}  # one window: one line
    curves.plot_metric_vs_n(frame, "latency_s", tmp_path / "l.png", ylabel="t", title="t")
    (ax,) = visible_axes(drawn["l.png"])
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert (
        lines["sliding_window@0.1"].get_linestyle() == "None" and lines["sliding_window@0.05"].get_linestyle() != "None"
    )
    assert {t.get_text() for t in ax.texts} >= set(knobs.values())
    assert any(line.get_gid() == "timeout" for line in ax.get_lines())  # dense's timeout at 8K is marked
    assert "timed out" in legend_labels(drawn["l.png"])
    assert "no point: linformer@0.05 (unreachable)" in ax.get_title()  # a series absent from the panel says why


def test_the_error_figure_draws_an_unreachable_series_at_its_search_best_and_chunked_apart_from_dense(tmp_path, drawn):
    frame = frame_of(_matched_rows(), budgets=(0.05, 0.1))
    gaussian = frame[frame["inputs"] == "gaussian"]
    best = curves.search_best(gaussian[gaussian["series"] == "linformer@0.1"])
    assert list(best.index) == [1024, 2048, 4096, 8192] and best[1024] == pytest.approx(0.7 + 1024 / 2e4)
    curves.plot_error_vs_n(frame, tmp_path / "e.png", budgets=(0.05, 0.1), metric="rel_l2")
    panel = visible_axes(drawn["e.png"])[0]  # gaussian
    searched = {line.get_label().lstrip("_") for line in panel.get_lines() if line.get_gid() == plotting.SEARCH_GID}
    assert searched == {"linformer@0.05", "linformer@0.1", "sliding_window@0.05", "sliding_window@0.1"}
    styles = series_styles(frame)
    assert (styles["chunked"]["marker"], styles["chunked"]["linestyle"]) != (
        styles["dense"]["marker"],
        styles["dense"]["linestyle"],
    )
