"""`--executor local` (the default): each cell measured in the driver's own process, one after another."""

from __future__ import annotations

from typing import Any

from harness.executors.base import SequentialExecutor
from harness.executors.worker import CellJob, run_cell


class LocalExecutor(SequentialExecutor):
    """In-process, sequential: inputs and fits are kept between consecutive cells (one MeasureContext)."""

    name = "local"

    def __init__(self, job: CellJob):
        from harness.measure import MeasureContext

        super().__init__(job)
        self.context = MeasureContext()

    def measure(self, cell: Any) -> dict[str, Any]:
        return run_cell(cell, self.job, self.context)
