"""`python -m harness compare RUN_A RUN_B`: match the cells of two runs, print the summary, write compare.md and compare.csv."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import UsageError
from harness.report.analysed import analyse
from harness.report.compare import compare_runs, summary_lines, write_outputs
from harness.report.verdicts import DEFAULT_THRESHOLD
from harness.schema import CELL_FIELDS, DECLARED
from harness.store import load_run

MATCHED_FIELDS = [name for name in CELL_FIELDS if DECLARED[name].matched]

PRINT_LIMIT = 25  # flagged cells printed on the terminal (the files hold all)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run folder")
    parser.add_argument("run_b", metavar="RUN_B", help="the run to judge against it")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"minimum relative change of latency/memory to flag (default {DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where to write compare.md and compare.csv (default RUN_B/compare_vs_<A>)",
    )
    parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any cell regressed")


def run(args: argparse.Namespace) -> int:
    if not (0 <= args.threshold < 10):
        raise UsageError(f"--threshold {args.threshold}: must be a relative change in [0, 10), e.g. 0.05 for 5%")
    a, b = analyse(load_run(args.run_a)), analyse(load_run(args.run_b))
    comparison = compare_runs(a, b, threshold=args.threshold)
    if not len(comparison.cells):
        raise UsageError(
            f"no cell of {a.path} matches one of {b.path} ({len(a.frame)} and {len(b.frame)} rows); cells match on "
            f"every field of a cell but the seed, the device and a searched quality knob: {', '.join(MATCHED_FIELDS)}"
        )
    for line in summary_lines(comparison, a, b, limit=PRINT_LIMIT):
        print(line)
    out = Path(args.out) if args.out else b.path / f"compare_vs_{a.name}"
    for path in write_outputs(comparison, a, b, out):
        print(f"wrote {path}")
    if args.fail_on_regression and len(comparison.regressions):
        return 1
    return 0
