"""The driver loop every executor shares: pull cells lazily, keep slots full, hand rows back, drop doomed cells."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from harness.executors.base import Executor, row_of

POLL_S = 0.5  # how long the driver waits for a row before it looks at limits and queues again


def run_cells(
    executor: Executor,
    cells: Iterable[Any],
    *,
    skip: Callable[[Any], dict[str, Any] | None],
    on_row: Callable[[Any, dict[str, Any], bool], None],
    on_start: Callable[[Any], None] = lambda cell: None,
) -> None:
    """Drive `executor` over `cells` (pulled lazily, in order) until every cell has a row.

    skip(cell): a "not run" row for a cell that should not run (now), else None; asked when a cell
    is pulled and again for queued cells after each row. on_row(cell, row, measured) is called once
    per cell, as rows arrive (a row whose cell_id is not its cell's becomes an error row: base.row_of); on_start(cell)
    when a cell is handed to the executor.
    """
    pending = iter(cells)
    exhausted = False
    while True:
        batch: list[Any] = []
        while not exhausted and (executor.slots is None or executor.in_flight + len(batch) < executor.slots):
            cell = next(pending, None)
            if cell is None:
                exhausted = True
                break
            outcome = skip(cell)
            if outcome is not None:
                on_row(cell, outcome, False)
                continue
            batch.append(cell)
        if batch:
            for cell in batch:
                on_start(cell)
            executor.submit(batch)
        if executor.in_flight == 0:
            if exhausted:
                return
            continue
        for cell, row in executor.poll(POLL_S):
            on_row(cell, row_of(cell, row, executor.job.run), True)
        doomed = [cell for cell in executor.queued() if skip(cell) is not None]
        for cell in executor.cancel_queued(doomed) if doomed else ():
            on_row(cell, skip(cell), False)
