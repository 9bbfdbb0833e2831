"""The clock the answer comes from, the refusal when most timed cells were contended, and why nothing ran."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.clock import contended_count, on_clock, refusal, run_clock
from harness.report.findings import table_answers
from tests.helpers.synthetic_run import analysed_rows, make_rows

REFUSAL = "no verdict; rerun on a quiet machine, or pass --clock cpu to compare CPU time"


def _rows(contended: int | None = None, load: float = 14.2):
    """dense, chunked, sliding_window within 1e-3 at every N; sliding_window slower than dense on wall time (0.5x) and
    3x faster on CPU time; the first `contended` timed rows contended (None: every one)."""
    rows = make_rows(variants=("dense", "chunked", "sliding_window"), inputs=("gaussian",), with_failures=False)
    for i, r in enumerate(rows):
        r.update(rel_l2_error=1e-7, load_per_cpu=load, cpu_share=0.07, contended=contended is None or i < contended)
        r["cpu_latency_s"] = r["latency_s"] / 2
        if r["variant"] == "sliding_window":
            r.update(speedup=0.5, speedup_low=0.45, speedup_high=0.55)
            r.update(cpu_speedup=3.0, cpu_speedup_low=2.8, cpu_speedup_high=3.2)
        elif r["variant"] == "chunked":
            r.update(speedup=0.9, speedup_low=0.85, speedup_high=0.95)
            r.update(cpu_speedup=0.9, cpu_speedup_low=0.85, cpu_speedup_high=0.95)
    return rows


def test_a_setting_measured_mostly_contended_gets_no_verdict_on_the_wall_clock():
    (line,) = table_answers(list(analysed_rows(_rows(), clock="wall").tables))
    assert line == (
        "answer at N=8192 (gaussian): measured under load 14 per CPU (every timed cell contended): " + REFUSAL
    )
    some = _rows(contended=5)  # 5 of 18 timed cells: the cells say so, the answer stands
    (line,) = table_answers(list(analysed_rows(some, clock="wall").tables))
    assert REFUSAL not in line and "rel_l2<=0.01: dense" in line
    assert refusal(pd.DataFrame(_rows(contended=10)), "wall") is not None  # 10 of 18: most


def test_clock_cpu_answers_from_cpu_time_and_says_so():
    wall = analysed_rows(_rows(contended=0), clock="wall")
    cpu = analysed_rows(_rows(contended=0), clock="cpu")
    assert "rel_l2<=0.01: dense" in table_answers(list(wall.tables))[0]  # 0.5x on wall: dense wins
    assert "sliding_window(window=128) 3x [2.8-3.2]" in table_answers(list(cpu.tables))[0]
    assert cpu.clock == "cpu" and wall.clock == "wall"
    loaded = analysed_rows(_rows(), clock="cpu")  # contended, but CPU time is what it compares: a verdict
    assert "sliding_window(window=128) 3x" in table_answers(list(loaded.tables))[0]
    # the spec's clock (sweep --clock cpu) is the run's; report --clock overrides it
    assert analysed_rows(_rows(contended=0), spec_text='clock = "cpu"\n').clock == "cpu"
    assert analysed_rows(_rows(contended=0), spec_text='clock = "cpu"\n', clock="wall").clock == "wall"
    assert run_clock({}) == "wall" and run_clock({"clock": "bogus"}) == "wall"


def test_on_clock_swaps_in_cpu_numbers_only_where_a_row_has_them():
    frame = pd.DataFrame(
        [
            {
                "latency_s": 2.0,
                "latency_p20_s": 1.9,
                "latency_p80_s": 2.1,
                "speedup": 0.5,
                "cpu_latency_s": 1.0,
                "speedup_low": 0.4,
                "speedup_high": 0.6,
                "cpu_speedup": 3.0,
                "cpu_speedup_low": 2.0,
                "cpu_speedup_high": 4.0,
            },
            {
                "latency_s": 5.0,
                "latency_p20_s": 4.9,
                "latency_p80_s": 5.1,
                "speedup": 2.0,
                "cpu_latency_s": None,
                "speedup_low": 1.9,
                "speedup_high": 2.1,
                "cpu_speedup": None,
                "cpu_speedup_low": None,
                "cpu_speedup_high": None,
            },
        ]
    )
    out = on_clock(frame, "cpu")
    assert list(out["latency_s"]) == [1.0, 5.0] and list(out["speedup"]) == [3.0, 2.0]
    assert pd.isna(out["latency_p20_s"][0]) and out["latency_p20_s"][1] == 4.9
    assert on_clock(frame, "wall") is frame and frame["latency_s"][0] == 2.0


def test_contended_count_ignores_untimed_rows():
    rows = pd.DataFrame({"contended": [True, False, None, float("nan"), True]})
    assert contended_count(rows) == (2, 3)


@pytest.mark.parametrize("dense_fate", ["timeout", "not run"])
def test_none_within_budget_says_why(dense_fate):
    rows = make_rows(variants=("dense", "chunked"), inputs=("gaussian",), with_failures=False)
    for r in rows:
        if r["seq_len"] == 8192:
            status = "timeout"
            r.update(status=status, latency_s=None, reason="past the 60 s limit")
            if dense_fate == "not run" or r["variant"] == "chunked":
                r["reason"] = "not run: timeout at N=4096 for the same variant, config and setting"
    (line,) = table_answers(list(analysed_rows(rows, clock="wall").tables))
    dense = "dense timed out" if dense_fate == "timeout" else "dense not run (timed out at a shorter N)"
    assert line.endswith(f"none within budget ran ({dense}; 1 not run)")


def test_sweep_clock_is_a_spec_key_and_a_bad_value_is_one_line(capsys):
    from harness.commands import main

    assert main(["sweep", "--device", "cpu", "--clock", "cycles", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown value 'cycles'; expected one of wall, cpu" in err and len(err.strip().splitlines()) == 1, err
