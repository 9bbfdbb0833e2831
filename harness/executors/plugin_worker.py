"""The local executor's child process for plugin cells: started on the first cell of a variant from a plugin and kept
for the next ones, so a plugin that calls os._exit, crashes or swallows its cell's timeout costs its own row (and a
new child for the next plugin cell), never the sweep.

One process start per sweep rather than per cell (as `--executor subprocess` pays): the child keeps its inputs,
fits and paired baseline between plugin cells as the driver does between built-in ones. The child is
``python -m harness.executors.plugin_worker FD`` (a fresh interpreter: a fork of a process that has used CUDA or
OpenMP threads is not safe, and unlike multiprocessing's spawn it never re-imports the caller's script); it reads
the job and then one cell per line on stdin and writes one row per line to the pipe FD (a plugin's prints on stdout
cannot garble them). It ends when its stdin closes (the driver closed it or died).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from harness.executors.base import hard_limit_s
from harness.executors.worker import CellJob

KILL_WAIT_S = 5.0  # how long a child gets to exit after its stdin closed before it is killed


class PluginWorker:
    """A child process that measures cells sent to it, one at a time, restarted after one dies."""

    def __init__(self, job: CellJob):
        self.job = job
        self.process: subprocess.Popen | None = None
        self.rows: Any = None  # the read end of the child's row pipe

    def measure(self, cell: Any) -> dict[str, Any]:
        """The cell's row from the child; a child that dies or overruns the hard limit is the row's status."""
        from harness.executors.isolated import death_status
        from harness.measure import RunInfo, outcome_row

        run = RunInfo(**self.job.run)
        if self.process is None or self.process.poll() is not None:
            self._start()
        limit = hard_limit_s(self.job.settings.get("cell_timeout_s"))
        try:
            self.process.stdin.write(json.dumps(asdict(cell), default=str) + "\n")  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass  # the child died at start: its exit status below says how
        ready, _, _ = select.select([self.rows], [], [], limit)
        if not ready:
            self.close(kill=True)
            return outcome_row(
                cell, run, "timeout", f"plugin cell did not finish within {limit:g} s; its process was killed"
            )
        line = self.rows.readline()
        if line:
            return json.loads(line)
        code = self.process.wait(KILL_WAIT_S)  # type: ignore[union-attr]
        self.close()
        status, reason = death_status(code, "")
        return outcome_row(cell, run, status, reason.replace("isolated cell", "plugin cell's process", 1))

    def _start(self) -> None:
        from harness.executors.isolated import child_env

        self.close()
        read_end, write_end = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.executors.plugin_worker", str(write_end)],
            stdin=subprocess.PIPE,
            pass_fds=(write_end,),
            env=child_env(),
            text=True,
            start_new_session=True,  # the user's Ctrl-C reaches the driver, which stops the child
        )
        os.close(write_end)
        self.rows = os.fdopen(read_end, "r", encoding="utf-8")
        self.process.stdin.write(json.dumps(self.job.to_dict(), default=str) + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]

    def close(self, *, kill: bool = False) -> None:
        """Stop the child: its stdin closed, then killed if it is still running (a cell in flight has no row to give);
        `kill`: at once (it overran its limit)."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.process.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.rows.close()
        self.process = self.rows = None


def main(argv: list[str]) -> int:
    """In the child: the job, then each cell from stdin measured and its row written to the pipe argv[0]."""
    from harness.executors.worker import run_cell

    rows = os.fdopen(int(argv[0]), "w", encoding="utf-8")
    job = CellJob.from_dict(json.loads(sys.stdin.readline()))
    for line in sys.stdin:
        row = run_cell(json.loads(line), job)
        rows.write(json.dumps(row, default=str) + "\n")
        rows.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
