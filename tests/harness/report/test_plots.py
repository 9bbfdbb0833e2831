"""harness.report.plotting: one colour per variant, one style per config."""
from __future__ import annotations

import pytest

from harness.report import figures, plots, plotting
from harness.report.analysis import memory_limits, with_dense_ratios
from harness.report.budgets import with_budgets
from harness.report.plotting import FIGURE_FILES, series_styles, variant_colors
from harness.store import rows_frame
from tests.helpers.synthetic_run import make_rows


def test_one_colour_per_variant_in_every_figure():
    colors = variant_colors(["zeta", "dense", "alpha", "chunked"])
    assert colors["dense"] == "black" and colors["alpha"] != colors["zeta"]
    assert variant_colors(["alpha", "zeta"]) == {k: colors[k] for k in ("alpha", "zeta")}  # independent of who else ran
    frame = rows_frame([dict(r, config={"window": w}) for w in (64, 128) for r in make_rows(variants=("sliding_window",))]
                       + make_rows(variants=("dense",)))
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
    plots.plot_metric_vs_n(with_oom, "latency_s", tmp_path / "a.png", ylabel="t", title="t")
    assert "out of memory" in legend_labels(drawn["a.png"])
    without = frame_of(make_rows(inputs=("gaussian",), with_failures=False))
    plots.plot_metric_vs_n(without, "latency_s", tmp_path / "b.png", ylabel="t", title="t")
    assert "out of memory" not in legend_labels(drawn["b.png"]) and "dense" in legend_labels(drawn["b.png"])


def test_max_length_only_when_a_cell_ran_out_of_memory_or_timed_out(tmp_path):
    clean = frame_of(make_rows(inputs=("gaussian",), with_failures=False))
    assert plots.plot_memory_limits(memory_limits(clean), clean, tmp_path / "m.png") is None
    assert not (tmp_path / "m.png").exists()
    errored = frame_of([dict(r, status="error") if r["seq_len"] == 8192 else r for r in clean.to_dict("records")])
    assert plots.plot_memory_limits(memory_limits(errored), errored, tmp_path / "m.png") is None  # an error is no limit
    for status in ("oom", "timeout"):
        hit = frame_of([dict(r, status=status) if r["seq_len"] == 8192 and r["variant"] == "dense" else r
                        for r in clean.to_dict("records")])
        assert plots.plot_memory_limits(memory_limits(hit), hit, tmp_path / f"{status}.png") == tmp_path / f"{status}.png"
    paths, blocks = figures.figures(clean, tmp_path)
    assert FIGURE_FILES["limits"] not in {p.name for p in paths}
    assert not any(getattr(b, "file", None) == FIGURE_FILES["limits"] for b in blocks)
