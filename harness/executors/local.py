"""`--executor local` (the default): each cell measured in the driver's own process, one after another.

A cell of a variant from a plugin file or module (--plugin, a spec's `plugins`) runs in a child process kept for the
run's plugin cells (harness.executors.plugin_worker): a plugin that calls os._exit, segfaults or swallows the cell's
timeout then costs its own row (error, or timeout at the hard limit), never the sweep. That costs one process start per
sweep with plugins, and one more after each child that died (docs/reliability.md gives the measured seconds); built-in
variants stay in this process.
"""

from __future__ import annotations

from typing import Any

from harness.executors.base import SequentialExecutor
from harness.executors.plugin_worker import PluginWorker
from harness.executors.worker import CellJob, run_cell
from harness.measure import MeasureContext
from harness.plugins import load_plugins
from variants import get_variant, load_plugin


class LocalExecutor(SequentialExecutor):
    """In-process, sequential: inputs and fits are kept between consecutive cells (one MeasureContext); plugin cells
    in one child process (restarted after it dies)."""

    name = "local"

    def __init__(self, job: CellJob):
        super().__init__(job)
        self.context = MeasureContext()
        load_plugins(job.plugins)  # imported and checked already by the spec (harness.plugins): a no-op then
        self.plugin_modules = {load_plugin(target) for target in job.plugins}  # their module names
        self.plugin_worker = PluginWorker(job)

    def measure(self, cell: Any) -> dict[str, Any]:
        if self.from_plugin(cell.variant):
            return self.plugin_worker.measure(cell)
        return run_cell(cell, self.job, self.context)

    def close(self) -> None:
        self.plugin_worker.close()

    def from_plugin(self, variant: str) -> bool:
        """True when `variant` was registered by one of the run's plugins."""
        try:
            return get_variant(variant).module in self.plugin_modules
        except ValueError:  # not registered: run_cell makes its error row
            return False
