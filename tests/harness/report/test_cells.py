"""harness.report.tables (the cell tables): every cell's line, failures with their reason, both errors side by side."""

from __future__ import annotations

from harness.report.render import render_markdown
from harness.report.tables import cell_tables
from tests.helpers.synthetic_run import analysed_rows, make_rows


def test_the_cell_tables_show_one_minus_cosine_and_the_top_keys_recall_beside_relative_l2():
    md = render_markdown(cell_tables(analysed_rows(make_rows(inputs=("gaussian",)))))
    assert (
        "| rel. error | 1 - cosine | top-8 recall | uniform / zero error | fit error train / held-out | weights' grad error | reason |"
        in md
    )
    assert "| linformer | 256 | ok |" in md and "| 5.00e-02 | 5.00e-02 | - | - / - |  | - |  |" in md  # cosine 0.95
    assert "| dense | 8192 | OOM | - | - | - | - | - | - | - | - | - | - | - |" in md
    recalled = [dict(r, topk_recall=0.5) for r in make_rows(inputs=("gaussian",))]
    assert "| 5.00e-02 | 5.00e-02 | 0.50 | - / - |" in render_markdown(cell_tables(analysed_rows(recalled)))


def test_what_the_errors_are_measured_against_is_said_and_comes_from_the_rows():
    from tests.helpers.synthetic_run import BUDGET_SPEC, make_budget_rows

    full = analysed_rows(make_rows(inputs=("gaussian",)))
    assert full.accuracy_reference == "full" and "against exact float64 attention." in render_markdown(
        cell_tables(full)
    )
    rows = [dict(r, accuracy_reference="pattern") for r in make_budget_rows()]
    pattern = analysed_rows(rows, BUDGET_SPEC)
    assert pattern.accuracy_reference == "pattern"
    assert "restricted to each variant's own pattern" in render_markdown(cell_tables(pattern))
    older = analysed_rows(make_rows(inputs=("gaussian",)), 'accuracy_reference = "pattern"\n')  # rows without the field
    assert older.accuracy_reference == "pattern"  # ... take the run's spec
