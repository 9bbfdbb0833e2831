"""--memory-budget: after the planned cells, each train series is searched for the longest N within the budget; the
rows are appended like any other (a resumed run measures nothing again) and the report's answer names the longest N."""

from __future__ import annotations

import json

import pytest

from harness.plan import memory_verdict
from harness.report.analysed import analyse
from harness.report.document import write_report
from harness.report.lengths import cheapest_lines, plot_longest, table_rows
from harness.runner import run_sweep, sweep_spec
from harness.store import read_rows

BUDGET = 96 * 1024  # bytes: a dense train step of H = 1, D = 8 fits it at a few hundred tokens on CPU


def _spec():
    cli = dict(
        device="cpu",
        variants="dense",
        seq_lens="64",
        heads="1",
        head_dims="8",
        modes="forward,train",
        inputs="gaussian",
        error_budgets="",
        time_budget_s="0.005",
        repeats="1",
        error_rows="8",
        memory_budget=f"{BUDGET}B",
    )
    return sweep_spec(cli=cli)


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_the_search_finds_the_longest_n_within_the_budget_and_resumes_without_measuring_again(tmp_path, no_report):
    run_dir = run_sweep(_spec(), out=tmp_path, run_id="budget")
    rows = read_rows(run_dir)
    train = {r["seq_len"]: r for r in rows if r["mode"] == "train"}
    assert {r["seq_len"] for r in rows if r["mode"] == "forward"} == {64}  # forward series are not searched
    verdicts = {n: memory_verdict(r["status"], r["peak_memory_bytes"], BUDGET) for n, r in train.items()}
    longest = max(n for n, v in verdicts.items() if v is None)
    above = min(n for n, v in verdicts.items() if v is not None)
    assert len(train) > 2 and longest < above and above - longest <= max(64, longest // 8), verdicts
    assert train[longest]["peak_memory_bytes"] <= BUDGET < train[above]["peak_memory_bytes"]

    run_sweep(_spec(), resume=run_dir)
    assert len(read_rows(run_dir)) == len(rows)  # the search walked the same path from the rows it had

    analysed = analyse(run_dir)
    assert analysed.memory_budget == BUDGET and set(analysed.frame["seq_len"]) == {64}  # the rest: the requested N
    table = analysed.longest
    assert list(table["longest"]) == [longest] and list(table["fails"]) == [above]
    headers, lines = table_rows(table)
    assert "longest N" in headers and lines[0][3] == str(longest)
    (line,) = cheapest_lines(analysed.frame, BUDGET)
    assert line.startswith("within 96 KiB at N=64: dense recompute=none fp32") and "1.00x the time of dense" in line
    assert plot_longest(table, BUDGET, tmp_path / "longest.png").stat().st_size > 10_000

    # measured under load: the warning qualifies the answer, so it comes before the memory-budget section
    (run_dir / "rows.jsonl").write_text(
        "".join(json.dumps({**r, "load_per_cpu": 14.0, "noisy": True}) + "\n" for r in rows)
    )
    write_report(run_dir, maps=False)
    text = (run_dir / "report.md").read_text(encoding="utf-8")
    assert text.index("**This run was measured under load") < text.index("## Longest trainable N within 96 KiB")


def test_a_search_stopped_before_its_answer_says_where_the_answer_lies():
    # a search cut short (the session's time, Ctrl-C, SIGTERM) leaves brackets wider than an eighth, or a series
    # still doubling: the table and the figure say so instead of reading as the answer
    import pandas as pd

    from harness.plan import MAX_SEARCHED_SEQ_LEN
    from harness.report.lengths import COLUMNS, OTHER_KEYS

    setting = {k: "x" for k in OTHER_KEYS}
    cases = {  # series: (longest N that fits, shortest that does not)
        "finished": (448, 512),
        "bisecting": (1024, 2048),
        "doubling": (1024, None),
        "at the limit": (MAX_SEARCHED_SEQ_LEN, None),
    }
    longest = pd.DataFrame(
        [
            dict(
                setting,
                series=name,
                variant="dense",
                recompute="none",
                precision="fp32",
                longest=fits,
                peak=1.0,
                latency_s=1.0,
                per_token_s=1e-4,
                fails=fails,
                why="over budget" if fails else None,
            )
            for name, (fits, fails) in cases.items()
        ],
        columns=COLUMNS,
    )
    _, lines = table_rows(longest)
    by_series = {line[0]: line for line in lines}
    assert by_series["finished"][3] == "448" and by_series["at the limit"][-1] == "none up to the search's limit"
    assert by_series["bisecting"][3] == "1K (search stopped before narrowing)"
    assert by_series["doubling"][3].endswith("(search stopped before narrowing)")
    assert by_series["doubling"][-1] == "none measured above it"
