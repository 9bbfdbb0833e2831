"""`--executor local` (the default): each cell measured in the driver's own process, one after another."""
from __future__ import annotations

from typing import Any

from harness.executors import Executor
from harness.executors.worker import CellJob, run_cell


class LocalExecutor(Executor):
    """In-process, sequential: inputs and fits are kept between consecutive cells (one MeasureContext)."""

    name = "local"

    def __init__(self, job: CellJob):
        from harness.measure import MeasureContext

        self.job = job
        self.context = MeasureContext()
        self._cells: list[Any] = []

    @classmethod
    def from_spec(cls, spec: Any, job: CellJob) -> "LocalExecutor":
        return cls(job)

    @property
    def in_flight(self) -> int:
        return len(self._cells)

    def submit(self, cells: list[Any]) -> None:
        self._cells.extend(cells)

    def poll(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        """Measure the next cell now (the timeout does not apply: the cell's own limit does)."""
        cell = self._cells.pop(0)
        return [(cell, run_cell(cell, self.job, self.context))]
