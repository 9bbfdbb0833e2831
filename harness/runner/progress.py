"""The sweep's progress line on stderr (tqdm): cells done/total, the last cell's result and latency, a cost-weighted ETA.

The ETA counts each cell by its expected cost (about N*M*D*B*H, times 3.5 in train mode, plus a
fixed per-cell overhead), so a run whose long cells come last is not promised an early end; cells
that are skipped (already done, or not run after an OOM) leave the total instead of advancing it.
When stderr is not a terminal (a log file, CI, nohup) it writes a plain line instead, at most every
PLAIN_EVERY_S seconds, with the counts by status (and of contended cells) so far; silent when disabled (--quiet).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Callable, Iterable, TextIO

from tqdm import tqdm

from harness.report.render import format_seconds_compact
from harness.row import Row
from harness.schema import Cell

PLAIN_EVERY_S = 30.0  # seconds between plain progress lines when stderr is not a terminal
OVERHEAD_N = 512  # a cell's fixed cost (build, accuracy check, warm-up) as that of an N=512 attention


def expected_cost(cell: Cell) -> float:
    """A cell's relative expected time: attention's N*M*D*B*H (x3.5 for forward+backward) plus a fixed overhead."""
    work = (cell.seq_len * cell.kv_len + OVERHEAD_N**2) * cell.head_dim * cell.batch * cell.heads
    return work * (3.5 if cell.mode == "train" else 1.0)


class Progress:
    """One redrawn stderr line; `start(cell)` before a cell runs, `finish(cell, row, measured)` when its row arrives."""

    def __init__(
        self,
        cells: Iterable[Cell],
        done: set[str] = frozenset(),
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        cells = list(cells)
        self.stream = stream or sys.stderr
        terminal = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = enabled and terminal
        self.plain = enabled and not terminal  # a line every PLAIN_EVERY_S seconds instead of a redrawn one
        self.clock = clock
        self._next_plain = clock() + PLAIN_EVERY_S
        self.statuses: Counter[str] = Counter()  # of the rows that arrived in this process
        self.contended = 0  # of them, timed while the machine took the cores away (harness.measure.contention)
        self.total = len(cells)
        self.done = sum(cell.cell_id in done for cell in cells)
        self.last = ""
        self._costs = {cell.cell_id: expected_cost(cell) for cell in cells}
        # what the ETA covers
        self.planned_cost = sum(cost for cell_id, cost in self._costs.items() if cell_id not in done)
        self.measured_cost = 0.0  # of it, the cells measured so far
        self._bar = tqdm(
            total=self.planned_cost,
            file=self.stream,
            disable=not self.enabled,
            leave=False,
            dynamic_ncols=True,
            smoothing=0,
            bar_format="{desc} |{bar:16}| ETA {remaining} {postfix}",
        )
        self._describe()

    def start(self, cell: Cell) -> None:
        """Show the cell about to run."""
        self._bar.set_postfix_str(self._postfix(f"now {cell.label}"), refresh=True)

    def finish(self, cell: Cell, row: Row, *, measured: bool = True) -> None:
        """Count a cell whose row arrived; a skipped cell (not measured) leaves the ETA's total."""
        self.done += 1
        cost = self._costs.get(cell.cell_id, 0.0)
        if measured:
            self.measured_cost += cost
            self._bar.update(cost)
        else:
            self.planned_cost = max(self.measured_cost, self.planned_cost - cost)
            self._bar.total = self.planned_cost
        latency = f" {format_seconds_compact(row.latency_s)}" if row.status == "ok" else ""
        contended = row.contended is True
        self.last = f"last {cell.label}: {row.status}{latency}{' contended' if contended else ''}"
        self.statuses[str(row.status)] += 1
        self.contended += contended
        self._describe()
        self._bar.set_postfix_str(self._postfix(), refresh=True)
        now = self.clock() if self.plain else 0.0
        if self.plain and now >= self._next_plain:
            self._next_plain = now + PLAIN_EVERY_S
            counts = ", ".join(f"{n} {status}" for status, n in self.statuses.most_common())
            counts += f"; {self.contended} contended" if self.contended else ""
            print(f"progress: {self.done}/{self.total} cells ({counts}); {self.last}", file=self.stream, flush=True)

    def close(self) -> None:
        self._bar.close()

    def _describe(self) -> None:
        self._bar.set_description_str(f"{self.done}/{self.total} cells", refresh=False)

    def _postfix(self, now: str = "") -> str:
        return " | ".join(part for part in (self.last, now) if part)
