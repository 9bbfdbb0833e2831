"""What bounds a sweep's wall time, from its planned cells and the per-cell limits: the line `--dry-run` ends with."""

from __future__ import annotations

from typing import Sequence

from harness.report.render import format_duration
from harness.runner.processes import later_processes
from harness.schema import Cell
from harness.spec import SweepSpec
from variants import get_variant

SERIAL_EXECUTORS = ("local", "subprocess")  # one cell at a time: the bound is their sum


def fits(cell: Cell) -> bool:
    """Whether a cell searches an error budget or calibrates a learnable variant (both under --fit-timeout)."""
    return cell.matched_budget is not None or get_variant(cell.variant).capabilities.learnable


def wall_time_line(spec: SweepSpec, cells: Sequence[Cell]) -> str:
    """'wall time: at most 26 min (12 cells x the 120 s --timeout, 8 of them + the 600 s --fit-timeout); at least
    3 s of timing (--time-budget per cell); plus the machine's limits (cached a day) and the report'."""
    if not cells:
        return "wall time: nothing to run"
    fitting = sum(fits(c) for c in cells)
    later = later_processes(spec)  # harness.runner.processes re-times the paired cells
    paired = sum(c.phase == "prefill" and c.scope == "attention" for c in cells)  # the cells timed in pairs
    each = f", {paired} of them in {spec.processes} processes" if later and paired else ""
    timed = len(cells) + paired * later
    floor = f"at least {format_duration(timed * spec.time_budget_s)} of timing (--time-budget per cell and process)"
    if not spec.cell_timeout_s or (fitting and not spec.fit_timeout_s):
        bound = "no upper bound (a --timeout or --fit-timeout of 0 is no limit)"
    else:
        ceiling = timed * spec.cell_timeout_s + fitting * (spec.fit_timeout_s or 0)
        fit_text = f", {fitting} of them + the {spec.fit_timeout_s:g} s --fit-timeout" if fitting else ""
        bound = (
            f"at most {format_duration(ceiling)} "
            f"({len(cells)} cells x the {spec.cell_timeout_s:g} s --timeout{each}{fit_text})"
        )
    parallel = "" if spec.executor in SERIAL_EXECUTORS else f"; {spec.executor} runs cells at once: less"
    starts = f", {later} process starts (--processes)" if later and paired else ""
    return f"wall time: {bound}; {floor}; plus the machine's limits (cached a day){starts} and the report{parallel}"
