"""`python -m harness report RUN_DIR`: report.md, a self-contained report.html and PNG figures, written into the run folder."""

from __future__ import annotations

import argparse
import sys

from harness.errors import UsageError
from harness.inputs import parse_inputs
from harness.measure.timer import Stopwatch
from harness.plugins import load_plugins
from harness.report import write_report
from harness.report.analysed import analyse
from harness.report.analysis import DEFAULT_BUDGETS
from harness.spec.sweep_spec import CLOCKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run folder made by `python -m harness sweep` (holds rows.jsonl)"
    )
    parser.add_argument(
        "--no-maps", action="store_true", help="skip the effective attention maps (they run each variant on CPU)"
    )
    parser.add_argument(
        "--maps-n", type=int, default=64, metavar="N", help="N = M = D of the attention maps (default 64)"
    )
    parser.add_argument(
        "--maps-inputs",
        default=None,
        metavar="NAME",
        help="input distribution of the maps (default: local if measured)",
    )
    parser.add_argument(
        "--maps-uncalibrated",
        action="store_true",
        help="draw learnable variants as built instead of in the fitted state the sweep stored (RUN_DIR/fitted/)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        action="append",
        default=None,
        metavar="ERR",
        help="error budget of the answer in the run's metric, repeatable (default: the run's error_budgets, "
        f"else {' and '.join(map(str, DEFAULT_BUDGETS))})",
    )
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default=None,
        help="what the speed-ups and the answer come from: wall, or cpu (the timing thread's CPU time, for a run "
        "measured on a busy machine); default: the run's own (sweep --clock), else wall (docs/timing.md)",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="import a user's variants first (for the maps)",
    )


def run(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    if args.maps_n < 2 or args.maps_n > 1024:
        raise UsageError(f"--maps-n {args.maps_n}: must be between 2 and 1024 (a heatmap of N x N weights); try 64")
    if args.maps_inputs is not None:
        try:
            parse_inputs(args.maps_inputs)  # an unknown distribution or knob, or a bad value
        except ValueError as exc:
            raise UsageError(f"--maps-inputs {args.maps_inputs}: {exc}") from None
    if args.budget and any(not (b > 0) for b in args.budget):
        raise UsageError(f"--budget {args.budget}: error budgets must be > 0, e.g. --budget 0.01")
    watch = Stopwatch.started()
    analysed = analyse(args.run_dir, budgets=tuple(args.budget) if args.budget else None, clock=args.clock)
    if not len(analysed.frame):
        print(
            f"error: {args.run_dir}: no readable row in rows.jsonl; nothing to report (run or resume the sweep first)",
            file=sys.stderr,
        )
        return 1
    paths = write_report(
        analysed,
        maps=not args.no_maps,
        maps_n=args.maps_n,
        maps_inputs=args.maps_inputs,
        maps_calibrate=not args.maps_uncalibrated,
        plugins=tuple(args.plugin),
    )
    for path in paths:
        print(path)
    print(f"report written in {watch.seconds:.1f} s", flush=True)
    return 0
