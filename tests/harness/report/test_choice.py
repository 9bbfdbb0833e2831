"""harness.report.choice: per setting and inputs, N x budget, the fastest candidate within the budget; a variant beats
dense only when its interval is above 1, overlapping intervals are a tie, out-of-budget rows never win."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report.choice import NONE_RAN
from harness.report.findings import table_answers
from tests.helpers.synthetic_run import BUDGET_SPEC, analysed_rows, make_budget_rows, make_rows


def _table(rows, spec_text=BUDGET_SPEC, budgets=None):
    (table,) = analysed_rows(rows, spec_text, budgets).tables
    return table


def _paired(sliding, chunked=None):
    """dense, chunked and sliding_window within 1e-3 at every N; each non-dense gets a paired (speedup, low, high) or none."""
    rows = make_rows(variants=("dense", "chunked", "sliding_window"), inputs=("gaussian",), with_failures=False)
    for r in rows:
        r["rel_l2_error"] = 1e-7
        paired = {"sliding_window": sliding, "chunked": chunked}.get(r["variant"])
        if paired:
            r["speedup"], r["speedup_low"], r["speedup_high"] = paired
    return _table(rows, spec_text=None, budgets=(1e-3,))


def test_the_winner_is_the_fastest_within_the_budget_with_its_knob_and_interval():
    table = _table(make_budget_rows())
    assert table.budgets == (0.05, 0.1) and table.metric == "rel_l2" and table.lengths == (1024, 2048, 4096, 8192)
    win = table.picks[(2048, 0.05)]
    assert (win.label, win.variant) == ("sliding_window(window=512)", "sliding_window")
    assert win.text() == "sliding_window(window=512) 2.1x [1.9-2.3]"
    assert table.picks[(4096, 0.1)].text() == "linformer(k=256) 12.8x [12.5-13.1] (error 0.105)"


def test_dense_wins_when_the_fastest_interval_overlaps_1():
    table = _table(make_budget_rows())
    at_1k = table.picks[(1024, 0.05)]  # sliding_window 1.05x [0.95-1.16]: not shown to beat dense
    assert at_1k.label == "dense" and at_1k.text() == "dense (tie: sliding_window(window=512))"
    assert (
        _paired((1.1, 0.95, 1.3), (0.5, 0.4, 0.6)).picks[(256, 1e-3)].text()
        == "dense (tie: sliding_window(window=128))"
    )
    assert (
        _paired((1.5, 1.4, 1.6), (0.5, 0.4, 0.6)).picks[(256, 1e-3)].text()
        == "sliding_window(window=128) 1.5x [1.4-1.6]"
    )
    # A variant reliably slower than dense is no tie.
    assert _paired((0.5, 0.4, 0.6), (0.3, 0.2, 0.4)).picks[(256, 1e-3)].text() == "dense"


def test_out_of_budget_rows_never_win():
    rows = make_budget_rows()
    fast = dict(
        rows[0],
        variant="sliding_window",
        config={"backend": "auto", "window": 64},
        rel_l2_error=0.2,
        speedup=50.0,
        speedup_low=45.0,
        speedup_high=55.0,
        cell_id="fast",
    )  # unmatched, error 0.2
    table = _table(rows + [fast])
    assert all("window=64" not in p.text() for p in table.picks.values())
    # linformer@0.1 (error 0.105) is no candidate at 0.05, and unreachable rows (status unreachable) never are.
    assert all(p.variant != "linformer" for (n, b), p in table.picks.items() if b == 0.05)


def test_a_matched_row_within_the_margin_counts_an_unmatched_one_does_not():
    rows = make_budget_rows()
    assert _table(rows).picks[(2048, 0.1)].variant == "linformer"  # error 0.105 <= 0.1 * 1.1, matched to 0.1
    unmatched = [dict(r, matched_budget=None) if r["variant"] == "linformer" else r for r in rows]
    assert _table(unmatched).picks[(2048, 0.1)].label == "sliding_window(window=256)"


def test_overlapping_intervals_of_the_top_two_are_a_tie():
    assert (
        _table(make_budget_rows()).picks[(8192, 0.1)].text()
        == "linformer(k=256) 25.6x [12.8-38.4] (error 0.105; tie: sliding_window(window=256))"
    )
    assert _paired((1.5, 1.3, 1.7), (1.4, 1.2, 1.6)).picks[(256, 1e-3)].tie == "chunked(chunk_size=256)"
    assert _paired((2.0, 1.9, 2.1), (1.4, 1.2, 1.6)).picks[(256, 1e-3)].tie is None


def test_rows_without_an_interval_compare_their_latency_ranges():
    rows = make_rows(variants=("dense", "chunked"), inputs=("gaussian",), with_failures=False)
    for r in rows:  # chunked 2% faster than dense, both spread +/- 10%: not reliably faster
        if r["variant"] == "chunked":
            r["latency_s"] = 0.98e-9 * r["seq_len"] ** 2
        r["latency_p20_s"], r["latency_p80_s"] = r["latency_s"] * 0.9, r["latency_s"] * 1.1
    assert _table(rows, None, (1e-3,)).picks[(256, 1e-3)].text() == "dense (tie: chunked(chunk_size=256))"
    for r in rows:  # tight spreads: the same 2% is a win
        r["latency_p20_s"], r["latency_p80_s"] = r["latency_s"] * 0.999, r["latency_s"] * 1.001
    assert _table(rows, None, (1e-3,)).picks[(256, 1e-3)].text() == "chunked(chunk_size=256) 1x"


def test_where_dense_did_not_run_the_fastest_by_latency_and_where_nothing_did_none():
    table = _table(make_rows(inputs=("gaussian",)), None, (1e-3, 0.1))  # dense out of memory at 8192
    assert [table.picks[(n, 1e-3)].label for n in table.lengths[:-1]] == ["dense"] * 5
    assert table.picks[(8192, 1e-3)].text() == "chunked(chunk_size=256) 101 ms, dense oom"
    assert {table.picks[(n, 0.1)].variant for n in table.lengths} == {"linformer"}  # error 0.05, sliding_window's 0.3
    assert np.isnan(table.picks[(8192, 0.1)].speedup)
    none = _table(make_rows(inputs=("gaussian",)), None, (1e-9,)).picks[(256, 1e-9)]
    assert none.text() == f"{NONE_RAN} (4 ran outside the budget)"  # why, in its own words


def test_runs_without_budgets_use_the_defaults_and_the_budgets_argument_wins():
    assert _table(make_rows(inputs=("gaussian",)), spec_text=None).budgets == (0.01, 0.1)
    assert _table(make_budget_rows(), budgets=(0.2,)).budgets == (0.2,)


def test_answer_lines_give_the_largest_n_per_input_distribution():
    lines = table_answers(list(analysed_rows(make_budget_rows(inputs=("gaussian", "local")), BUDGET_SPEC).tables))
    assert lines == [
        f"answer at N=8192 ({d}): rel_l2<=0.05: sliding_window(window=512) 8.4x [7.6-9.2]; "
        "rel_l2<=0.1: linformer(k=256) 25.6x [12.8-38.4] (error 0.105; tie: sliding_window(window=256))"
        for d in ("gaussian", "local")
    ]


@pytest.mark.parametrize("rows", [[], [dict(r, status="error", reason="boom") for r in make_budget_rows()]])
def test_no_table_without_an_ok_row(rows):
    assert analysed_rows(rows, BUDGET_SPEC).tables == ()


def test_paired_speedup_overrides_the_latency_ratio_and_old_rows_fall_back():
    frame = analysed_rows(
        make_budget_rows() + make_rows(variants=("chunked",), inputs=("local",), lengths=(1024,), with_failures=False),
        BUDGET_SPEC,
    ).frame
    sw = frame[(frame["variant"] == "sliding_window") & (frame["seq_len"] == 2048)]
    assert np.allclose(sw["dense_speedup"], [2.1, 3.2]) and np.allclose(
        sw["speedup"], [2.1, 3.2]
    )  # the rows' paired medians
    old = frame[
        (frame["variant"] == "chunked") & frame["speedup_low"].isna()
    ]  # no paired fields: dense latency / latency
    assert len(old) == 1 and np.allclose(old["dense_speedup"], old["dense_latency_s"] / old["latency_s"])
    assert old["speedup"].isna().all()  # the row's own speedup keeps its meaning: none was paired


def test_the_same_config_found_for_two_budgets_is_one_candidate_not_a_tie_with_itself():
    rows = make_rows(variants=("dense", "sliding_window"), inputs=("gaussian",), with_failures=False)
    matched = []
    for r in rows:
        r["rel_l2_error"] = 1e-7 if r["variant"] == "dense" else 0.03
        if r["variant"] == "sliding_window":
            for budget, speedup in ((0.05, (2.0, 1.8, 2.2)), (0.1, (2.1, 1.9, 2.3))):  # one window, measured twice
                matched.append(
                    dict(
                        r,
                        cell_id=f"{r['cell_id']}-{budget}",
                        matched_budget=budget,
                        error_metric="rel_l2",
                        speedup=speedup[0],
                        speedup_low=speedup[1],
                        speedup_high=speedup[2],
                    )
                )
    rows = [r for r in rows if r["variant"] == "dense"] + matched
    table = _table(rows, spec_text=BUDGET_SPEC)
    for budget, text in (
        (0.05, "sliding_window(window=128) 2x [1.8-2.2]"),
        (0.1, "sliding_window(window=128) 2.1x [1.9-2.3]"),
    ):
        assert table.picks[(256, budget)].text() == text  # the row matched to this budget, and no "(tie: itself)"


def test_the_figures_inputs_are_those_where_the_most_series_ran():
    from harness.report.analysis import primary_inputs
    from harness.store import rows_frame

    rows = make_budget_rows(inputs=("gaussian", "local"))
    frame = rows_frame([r for r in rows if not (r["inputs"] == "gaussian" and r["variant"] == "sliding_window")])
    assert primary_inputs(frame) == "local"
    assert primary_inputs(rows_frame(rows)) == "gaussian"  # a tie: gaussian


def test_an_impossible_row_is_never_the_winner():
    rows = make_rows(variants=("dense", "sliding_window"), inputs=("gaussian",), with_failures=False)
    for r in rows:
        r["rel_l2_error"] = 1e-7
        if r["variant"] == "sliding_window":
            r["speedup"], r["speedup_low"], r["speedup_high"] = (1.5, 1.4, 1.6)
    assert _table(rows, spec_text=None, budgets=(1e-3,)).picks[(256, 1e-3)].variant == "sliding_window"
    for r in rows:
        if r["variant"] == "sliding_window":
            r["impossible"] = "250% of the measured compute peak"
    assert _table(rows, spec_text=None, budgets=(1e-3,)).picks[(256, 1e-3)].label == "dense"
