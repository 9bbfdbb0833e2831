"""Where a series stopped: statuses at one N that spare the series (a cell minus its length) its longer N."""

from __future__ import annotations

import dataclasses

from harness.measure.tuning import knob_range
from harness.row import Row
from harness.schema import NOT_RUN_PREFIX, Cell
from variants import get_variant

# Statuses at N that spare a series its longer N: out of memory, the time limit, and an error budget no value of the
# knob met (skipped only where the knob's range is the one searched: unreachable_carries_over).
BLOCKING = ("oom", "timeout", "unreachable")


def blocked_series(rows: list[Row], cells: list) -> dict[tuple[str, str], tuple[str, int]]:
    """Series (a cell minus its length) that hit OOM, the time limit or an unreachable budget in earlier rows, and at which N."""
    by_id = {cell.cell_id: cell for cell in cells}
    blocked: dict[tuple[str, str], tuple[str, int]] = {}
    for row in rows:
        cell = by_id.get(row.cell_id)
        if cell is None or row.status not in BLOCKING or str(row.reason or "").startswith(NOT_RUN_PREFIX):
            continue
        block(blocked, cell, row.status)
    return blocked


def block(blocked: dict[tuple[str, str], tuple[str, int]], cell, status: str) -> None:
    """Record where the cell's series stopped, under (series, "stop") for oom and timeout at the shortest N (nothing
    longer runs) and under (series, "unreachable") at the longest searched N (its knob range is what a longer N is
    compared with): one does not hide the other."""
    kind = "unreachable" if status == "unreachable" else "stop"
    current = blocked.get((cell.series_key, kind))
    if current is None or (cell.seq_len > current[1] if kind == "unreachable" else cell.seq_len < current[1]):
        blocked[(cell.series_key, kind)] = (status, cell.seq_len)


def unreachable_carries_over(cell: Cell, unreachable_at: int) -> str | None:
    """Why the cell need not be searched, its budget being unreachable at the shorter N `unreachable_at` over the same
    knob range (at a fixed knob value a longer sequence is no easier to approximate); None when its range is wider."""
    shorter = dataclasses.replace(
        cell,
        seq_len=unreachable_at,
        kv_len=unreachable_at,
        config=get_variant(cell.variant).cls.config_for_length(dict(cell.config), unreachable_at),
    )
    field_name, low, high, _ = knob_range(cell)
    if (low, high) != knob_range(shorter)[1:3]:
        return None
    return (
        f"unreachable at N={unreachable_at} over the same {field_name} range {low}-{high}, "
        "and a longer N at a fixed value is no easier"
    )
