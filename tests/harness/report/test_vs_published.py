"""harness.report.published: a comparison table only where ours and the paper's both have a number, baselines named."""

from __future__ import annotations

from harness.report.analysis import with_dense_ratios
from harness.report.published import published_comparison
from harness.report.render import render_markdown
from harness.store import rows_frame
from tests.helpers.synthetic_run import make_rows

ENV = {"cpu": "Synthetic CPU"}


def markdown(rows) -> str:
    return render_markdown(published_comparison(with_dense_ratios(rows_frame(rows)), ENV))


def test_only_lengths_and_ks_the_paper_reports_are_tabled():
    md = markdown(make_rows(modes=("forward", "train")))
    assert "| linformer | 2048 | 128 |" in md and "| linformer | 256 |" not in md  # the paper has no N=256
    assert "| dense | non-causal | 512 |" in md and "| dense | non-causal | 256 |" not in md
    assert "| - |" not in md  # no row with one side missing


def test_a_comparison_without_a_paper_or_our_number_is_omitted():
    k64 = [dict(r, config={"k": 64}) if r["variant"] == "linformer" else r for r in make_rows(inputs=("gaussian",))]
    assert "Linformer speed-up" not in markdown(k64)  # the paper reports no k=64
    no_dense = make_rows(variants=("chunked", "linformer"), inputs=("gaussian",))
    md = markdown(no_dense)  # no dense: no speed-up, no memory ratio, no TFLOP/s of ours
    assert "Linformer speed-up" not in md and "Dense memory / chunked memory" not in md and "Dense TFLOP/s" not in md
    assert "No cell of this run matches a published comparison" in md


def test_the_chunked_memory_ratio_names_both_baselines():
    md = markdown(make_rows(inputs=("gaussian",)))
    assert "| forward | 4096 | dense, backend auto = sdpa | 8x | 16384 | 59x |" in md
    assert "paper (TPU v3, textbook N x N dense)" in md and "already memory-efficient" in md
