"""The local executor's child process for plugin cells: started on the first cell of a variant from a plugin and kept
for the next ones, so a plugin that calls os._exit, crashes or swallows its cell's timeout costs its own row (and a
new child for the next plugin cell), never the sweep.

One process start per sweep rather than per cell (as `--executor subprocess` pays): the child keeps its inputs,
fits and paired baseline between plugin cells as the driver does between built-in ones. Started with "spawn" (a
fork of a process that has used CUDA or OpenMP threads is not safe); it ends when the driver closes the pipe or dies.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import asdict
from typing import Any

from harness.executors.base import hard_limit_s
from harness.executors.worker import CellJob, run_cell

KILL_WAIT_S = 5.0  # how long a child that lost its pipe gets to exit before it is killed


class PluginWorker:
    """A child process that measures cells sent through a pipe, restarted after one dies."""

    def __init__(self, job: CellJob):
        self.job = job
        self.process: Any = None
        self.conn: Any = None

    def measure(self, cell: Any) -> dict[str, Any]:
        """The cell's row from the child; a child that dies or overruns the hard limit is the row's status."""
        from harness.executors.isolated import death_status
        from harness.measure import RunInfo, outcome_row

        run = RunInfo(**self.job.run)
        if self.process is None or not self.process.is_alive():
            self._start()
        limit = hard_limit_s(self.job.settings.get("cell_timeout_s"))
        self.conn.send(asdict(cell))
        if not self.conn.poll(limit):  # None: no limit
            self.close()
            return outcome_row(
                cell, run, "timeout", f"plugin cell did not finish within {limit:g} s; its process was killed"
            )
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(KILL_WAIT_S)
            code = self.process.exitcode
            self.close()
            status, reason = death_status(-9 if code is None else code, "")
            return outcome_row(cell, run, status, reason.replace("isolated cell", "plugin cell's process", 1))

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=serve, args=(child_end, self.job.to_dict()), daemon=True)
        self.process.start()
        child_end.close()

    def close(self) -> None:
        """Stop the child (at once: a cell in flight has no row to give)."""
        if self.process is None:
            return
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(KILL_WAIT_S)
        self.process = self.conn = None


def serve(conn: Any, job: dict[str, Any]) -> None:
    """In the child: measure each cell received, send its row back, until the pipe closes."""
    cell_job = CellJob.from_dict(job)
    while True:
        try:
            cell = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(run_cell(cell, cell_job))
