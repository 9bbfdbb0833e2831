"""`--executor local` (the default): each cell measured in the driver's own process, one after another.

A cell of a variant from a plugin file or module (--plugin, a spec's `plugins`) runs in a child process as with
`--executor subprocess` (harness.executors.isolated): a plugin that calls os._exit, segfaults or swallows the cell's
timeout then costs its own row (error, or timeout at the hard limit), never the sweep. That costs a process start per
plugin cell (docs/reliability.md gives the measured seconds); built-in variants stay in this process.
"""

from __future__ import annotations

from typing import Any

from harness.executors.base import SequentialExecutor
from harness.executors.worker import CellJob, run_cell


class LocalExecutor(SequentialExecutor):
    """In-process, sequential: inputs and fits are kept between consecutive cells (one MeasureContext); plugin cells
    in a child process each."""

    name = "local"

    def __init__(self, job: CellJob):
        from harness.measure import MeasureContext
        from variants import load_plugin

        super().__init__(job)
        self.context = MeasureContext()
        self.plugin_modules = {load_plugin(target) for target in job.plugins}  # imported already: names only

    def measure(self, cell: Any) -> dict[str, Any]:
        if self.from_plugin(cell.variant):
            from harness.executors.isolated import measure_isolated

            return measure_isolated(cell, self.job)
        return run_cell(cell, self.job, self.context)

    def from_plugin(self, variant: str) -> bool:
        """True when `variant` was registered by one of the run's plugins."""
        from variants import get_variant

        try:
            return get_variant(variant).module in self.plugin_modules
        except ValueError:  # not registered: run_cell makes its error row
            return False
