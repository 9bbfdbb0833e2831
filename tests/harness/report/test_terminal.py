"""harness.report.terminal: the summary a sweep prints, from a synthetic run's rows (no sweep runs here)."""

from __future__ import annotations

import re

from harness.report.findings import answer_lines
from harness.report.terminal import CONTENDED_MARK, REASON_WIDTH, reason_lines, summary_table
from harness.report.tables import NOISY_MARK
from tests.helpers.synthetic_run import BUDGET_SPEC, analysed_rows, make_budget_rows, make_rows


def test_a_series_that_never_ran_is_one_line_with_its_best_error_at_each_n():
    lines = summary_table(analysed_rows(make_budget_rows(), BUDGET_SPEC)).splitlines()
    (unreached,) = [line for line in lines if line.startswith("linformer@0.05")]
    assert re.fullmatch(r"linformer@0.05\s+unreachable\s+best 0.31\s+best 0.31\s+best 0.31\s+best 0.32", unreached)
    assert lines[-1] == unreached  # the last series of the table: no blank metric rows under it
    assert all(line.split() for line in lines[1:])  # no line of a table is blank


def test_each_distinct_failure_reason_is_one_line_with_its_cell_count_most_first():
    rows = make_rows(
        variants=("dense", "sliding_window"), inputs=("gaussian",), lengths=(256, 512), with_failures=False
    )
    long = "inputs 'model': pass --heads 12 --kv-heads 4 --head-dims 64 " + "x" * 300
    for r in rows:
        if r["variant"] == "sliding_window":
            r.update(status="unsupported", reason=long)
    rows[0].update(status="error", reason="RuntimeError:   planted\n failure")
    rows.append(dict(rows[1], cell_id="not-run", seq_len=1024, status="oom", reason="not run: a shorter N ran out"))
    lines = reason_lines(analysed_rows(rows))
    assert lines == [
        f"why: 2 cells unsupported: {long[: REASON_WIDTH - 3]}...",
        "why: 1 cell error: RuntimeError: planted failure",
    ]  # the cell not run after a shorter N failed is counted by the outcome line, not here


def test_a_noisy_or_contended_timing_is_marked_with_its_interval_and_the_marks_explained():
    rows = make_budget_rows()
    for r in rows:
        if r["variant"] in ("dense", "sliding_window") and r["seq_len"] == 8192:
            r.update(noisy=True, contended=r["variant"] == "sliding_window")
    text = summary_table(analysed_rows(rows, BUDGET_SPEC))
    assert f"8.40x [7.6-9.2]{NOISY_MARK}{CONTENDED_MARK}" in text  # sliding_window@0.05's paired interval
    assert f"67.1ms{NOISY_MARK}" in text  # dense's latency marked; its own 1.00x is not a measurement
    assert f"1.00x{NOISY_MARK}" not in text
    assert text.splitlines()[-1].startswith(f"{NOISY_MARK} noisy timing") and "95% interval" in text
    assert NOISY_MARK not in summary_table(analysed_rows(make_budget_rows(), BUDGET_SPEC))  # quiet rows: no marks


def test_the_answer_is_given_at_each_shorter_n_where_it_differs_from_the_longest():
    lines = answer_lines(analysed_rows(make_budget_rows(), BUDGET_SPEC))
    assert [line.split(":")[0] for line in lines] == ["answer at N=8192 (local)", "answer at N=1024 (local)"]
    assert lines[1].startswith("answer at N=1024 (local): rel_l2<=0.05: dense")  # 2K and 4K answer as 8K does


def test_a_run_without_error_budgets_names_none_in_its_answer():
    rows = make_rows(variants=("dense", "sliding_window"), inputs=("local",), with_failures=False)
    lines = answer_lines(analysed_rows(rows, 'variants = ["dense", "sliding_window"]\nerror_budgets = []\n'))
    assert lines[0].startswith("answer at N=8192 (local), no error budget (each config as given): sliding_window")
    assert lines[1] == "answer at N=256 (local), no error budget (each config as given): dense"  # 0.64x there
    assert not any("rel_l2" in line or "<=" in line for line in lines)
