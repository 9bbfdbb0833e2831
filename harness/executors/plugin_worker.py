"""The local executor's child process for plugin cells: started on the first cell of a variant from a plugin and kept
for the next ones, so a plugin that calls os._exit, crashes or swallows its cell's timeout costs its own row (and a
new child for the next plugin cell), never the sweep.

One process start per sweep rather than per cell (as `--executor subprocess` pays): the child keeps its inputs,
fits and paired baseline between plugin cells as the driver does between built-in ones. The child is the one
child-process runner's (harness.child) serving harness.executors.worker.serve_cells; it ends when the
driver closes it or dies.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from harness.executors.base import hard_limit_s
from harness.child import ChildFailed, ChildProcess
from harness.executors.isolated import cell_temp_root
from harness.executors.worker import CELL_SERVER, CellJob
from harness.measure import RunInfo, outcome_row

NAME = "plugin cell's process"  # how a failure's reason names the child


class PluginWorker:
    """A child process that measures cells sent to it, one at a time, restarted after one dies."""

    def __init__(self, job: CellJob):
        self.job = job
        self.child = ChildProcess(CELL_SERVER, job.to_dict(), name=NAME, temp_root=cell_temp_root(job))

    def measure(self, cell: Any) -> dict[str, Any]:
        """The cell's row from the child; a child that dies or overruns the hard limit is the row's status."""
        try:
            if not self.child.running:
                self._start()
            return self.child.run(asdict(cell), hard_limit_s(self.job.settings.get("cell_timeout_s")))
        except ChildFailed as failed:
            return outcome_row(cell, RunInfo(**self.job.run), failed.status, failed.reason)

    def _start(self) -> None:
        self.child.start()

    def close(self) -> None:
        """Stop the child (a cell in flight has no row to give)."""
        self.child.close()
