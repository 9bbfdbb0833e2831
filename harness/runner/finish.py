"""The end of a sweep: rows.csv, the report, and on stdout the table, the outcome, the answer and the folder."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from harness.report.analysed import analyse
from harness.report.findings import answer_lines
from harness.report.overview import outcome_line
from harness.report.terminal import reason_lines, summary_table
from harness.store import load_run, write_tables


def finish_run(run_dir: Path, *, plugins: tuple[str, ...] = ()) -> None:
    """rows.csv/Parquet, the report (a failure there is a warning); on stdout the table and why cells did not run
    (harness.report.terminal), the outcome, the report's path, its answer (harness.report.findings) and the folder. rows.jsonl is read once, here.

    `plugins`: the run's plugin targets, which the report's maps child imports too.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the reader skipped is in the run's notes, which the report lists
        run = load_run(run_dir)
    write_tables(run)
    analysed = analyse(run)
    reported = False
    try:
        from harness.report import write_report  # inside the try: a broken plotting install is this same warning

        write_report(analysed, plugins=plugins)
        reported = True
    except Exception as exc:  # the rows are safe on disk; a report failure is a warning, never silent
        print(
            f"warning: the report failed ({type(exc).__name__}: {exc}); "
            f"the rows are in {run_dir}; retry with python -m harness report {run_dir}",
            file=sys.stderr,
        )
    print(summary_table(analysed))
    for line in reason_lines(analysed):
        print(line)
    print(outcome_line(analysed))
    if reported and (run_dir / "report.html").is_file():
        print(f"report: {run_dir / 'report.html'}")
    try:
        for line in answer_lines(analysed):
            print(line)
    except Exception as exc:  # like the report's: the rows are safe, the answer is in the report or a retry away
        print(
            f"warning: the answer failed ({type(exc).__name__}: {exc}); see python -m harness report {run_dir}",
            file=sys.stderr,
        )
    print(f"run folder: {run_dir}")


def resume_command(run_dir: Path, plugins: tuple[str, ...] | list[str] = ()) -> str:
    """The command that continues `run_dir` (a spec file's plugins are imported only when named)."""
    return f"python -m harness sweep --resume {run_dir}" + "".join(f" --plugin {p}" for p in plugins)
