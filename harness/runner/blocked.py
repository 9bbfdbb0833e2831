"""Where a series stopped: statuses at one N that spare the series (a cell minus its length) its longer N."""

from __future__ import annotations

from harness.row import Row
from harness.schema import NOT_RUN_PREFIX

# Statuses at N that spare a series its longer N: out of memory, the time limit, and an error budget no value of the
# knob met (skipped only where the knob's range is the one searched: harness.measure.tuning.unreachable_carries_over).
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
