"""`--executor subprocess` (alias `--isolate`): each cell in a fresh child process, so a segfault or a hard OOM kill is a row.

The child (harness.child, serving harness.executors.worker.serve_cells) gets the job (measure settings, run
identity, plugins, run folder) and the cell, runs harness.executors.worker.run_cell (with the cell's own deadline) and
sends the row back. No row back means the child died: killed by SIGKILL (the kernel's OOM killer, typically) -> "oom";
another signal or exit code -> "error"; past the hard limit -> "timeout".

The child dies with its parent and removes its temp folder (harness.child). The temp folders live in
RUN_DIR/.cells/, so whatever a kill leaves anyway (the parent killed before its child started) stays in the run folder
and is removed by the next sweep or resume of it (clean_cell_temp).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.executors.base import SequentialExecutor, hard_limit_s
from harness.child import ChildFailed, ChildProcess
from harness.executors.worker import CELL_SERVER, CellJob
from harness.measure import RunInfo, outcome_row


class SubprocessExecutor(SequentialExecutor):
    """One child process per cell, one cell at a time (timings must not share the device)."""

    name = "subprocess"

    def measure(self, cell: Any) -> dict[str, Any]:
        return measure_isolated(cell, self.job)


def measure_isolated(cell: Any, job: CellJob) -> dict[str, Any]:
    """Measure `cell` in a subprocess; a crash, a kill or a hang becomes the row's status."""
    limit = hard_limit_s(job.settings.get("cell_timeout_s"), job.settings.get("fit_timeout_s"))
    with ChildProcess(CELL_SERVER, job.to_dict(), name="isolated cell", temp_root=cell_temp_root(job)) as child:
        try:
            return child.run(asdict(cell), limit)
        except ChildFailed as failed:
            return outcome_row(cell, RunInfo(**job.run), failed.status, failed.reason)


CELL_TEMP_DIR = ".cells"  # RUN_DIR/.cells/: each isolated cell's temp folder, so a leak stays in the run folder


def cell_temp_root(job: CellJob) -> str | None:
    """RUN_DIR/.cells (made here) when the run folder is known and writable, else None (the system's temp folder)."""
    if not job.run_dir:
        return None
    root = Path(job.run_dir) / CELL_TEMP_DIR
    try:
        root.mkdir(exist_ok=True)
    except OSError:
        return None
    return str(root) if root.is_dir() and not root.is_symlink() else None


def clean_cell_temp(run_dir: str | Path) -> None:
    """Remove what isolated cells of an earlier, killed sweep left in RUN_DIR/.cells (call it holding the folder's lock)."""
    root = Path(run_dir) / CELL_TEMP_DIR
    if root.is_symlink():
        root.unlink()
    elif root.is_dir():
        shutil.rmtree(root, ignore_errors=True)
