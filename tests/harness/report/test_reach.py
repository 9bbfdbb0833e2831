"""One verdict, two places: a variant whose search got no better than uniform attention is named so in the report's
out-of-reach line and in the sweep's closing answer lines (harness.report.reach)."""

from __future__ import annotations

from harness.report import findings
from harness.report.reach import out_of_reach
from tests.helpers.synthetic_run import BUDGET_SPEC, analysed_rows, make_budget_rows


def _analysed():
    rows = make_budget_rows(inputs=("gaussian", "local"))  # linformer misses 0.05 with 0.31 at its largest k
    uniform = {"gaussian": 0.33, "local": 0.9}  # 0.31 is no better than 0.33, well below 0.9
    return analysed_rows([dict(r, uniform_rel_l2_error=uniform[r["inputs"]]) for r in rows], BUDGET_SPEC)


def test_the_terminal_answer_names_a_variant_no_better_than_uniform_as_the_report_does():
    analysed = _analysed()
    gaussian, local = [line for line in findings.answer_lines(analysed) if line.startswith("answer at N=8192")]
    assert gaussian.endswith(
        "; out of reach: linformer for rel_l2<=0.05 no better than uniform attention (uniform 0.33)"
    )
    assert local.endswith("; out of reach: linformer for rel_l2<=0.05 (best 0.32)")  # 0.31 + N/1e6 at N=8192
    report = {t.inputs: out_of_reach(analysed.frame, t)[-1].text for t in analysed.tables}
    assert (
        "linformer for rel_l2 ≤ 0.05 at N=1K-8K (best 0.31: k=1024 at N=1K): no better than uniform attention "
        "(uniform 0.33)" in report["gaussian"]
    )
    assert "no better than uniform" not in report["local"]


def test_the_out_of_reach_line_names_the_sinks_the_search_reached_its_best_with():
    from harness.report.reach import unreached

    rows = [
        dict(r, variant="sliding_window", config={"window": 298, "sinks": 4, "backend": "auto"})
        | {"tuning": {"knob": "window", "high": 298, "tried": {"298": 0.38}}}
        for r in make_budget_rows()
        if r["status"] == "unreachable"
    ]
    table = _analysed().tables[0]
    (miss,) = unreached(analysed_rows(rows, BUDGET_SPEC).frame, table.setting, "local")
    assert miss.best == (0.38, "window=298 sinks=4", 1024)
