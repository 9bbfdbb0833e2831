"""`--executor subprocess` (alias `--isolate`): each cell in a fresh child process, so a segfault or a hard OOM kill is a row.

The parent writes the cell and the job (measure settings, run identity, plugins, run folder) to
a JSON file and runs ``python -m harness.executors.isolated IN OUT``; the child runs
harness.executors.worker.run_cell (with the cell's own deadline) and writes the row to OUT.
No row back means the child died: killed by SIGKILL (the kernel's OOM killer, typically) ->
"oom"; another signal or exit code -> "error"; past the hard limit -> "timeout".

The child dies with its parent: on Linux it asks for SIGTERM when the parent dies
(PR_SET_PDEATHSIG) and then removes its cell's temp folder, so a SIGKILLed sweep leaves no
orphan measuring on and no attnsuite-cell-* folder behind. The temp folders live in
RUN_DIR/.cells/, so whatever a kill leaves anyway (the parent killed before its child started)
stays in the run folder and is removed by the next sweep or resume of it (clean_cell_temp).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.executors.base import SequentialExecutor, hard_limit_s
from harness.executors.worker import CellJob


class SubprocessExecutor(SequentialExecutor):
    """One child process per cell, one cell at a time (timings must not share the device)."""

    name = "subprocess"

    def measure(self, cell: Any) -> dict[str, Any]:
        return measure_isolated(cell, self.job)


def measure_isolated(cell: Any, job: CellJob) -> dict[str, Any]:
    """Measure `cell` in a subprocess; a crash, a kill or a hang becomes the row's status."""
    from harness.measure import RunInfo, outcome_row

    run = RunInfo(**job.run)
    with tempfile.TemporaryDirectory(prefix="attnsuite-cell-", dir=cell_temp_root(job)) as tmp:
        request, result = Path(tmp) / "cell.json", Path(tmp) / "row.json"
        request.write_text(json.dumps({"cell": asdict(cell), "job": job.to_dict()}, default=str), encoding="utf-8")
        limit = hard_limit_s(job.settings.get("cell_timeout_s"), job.settings.get("fit_timeout_s"))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "harness.executors.isolated", str(request), str(result)],
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=limit,
            )
        except subprocess.TimeoutExpired:
            return outcome_row(
                cell, run, "timeout", f"isolated cell did not finish within {limit:g} s; its process was killed"
            )
        if result.exists():
            return json.loads(result.read_text(encoding="utf-8"))
        return outcome_row(cell, run, *death_status(done.returncode, done.stderr))


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
    import shutil

    root = Path(run_dir) / CELL_TEMP_DIR
    if root.is_symlink():
        root.unlink()
    elif root.is_dir():
        shutil.rmtree(root, ignore_errors=True)


def death_status(returncode: int, stderr: str) -> tuple[str, str]:
    """(status, reason) for a child that exited without a row."""
    tail = " ".join(stderr.strip().splitlines()[-3:])[-500:]
    if returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        if -returncode == signal.SIGKILL:
            return (
                "oom",
                f"isolated cell was killed by SIGKILL (most likely the kernel's out-of-memory killer) {tail}".strip(),
            )
        return "error", f"isolated cell crashed with signal {sig} {tail}".strip()
    return "error", f"isolated cell exited with code {returncode} and no row: {tail}".strip()


PARENT_ENV = "ATTNSUITE_ISOLATED_PARENT"  # the parent's pid, so the child can tell it died before it asked to be told


def child_env() -> dict[str, str]:
    """The environment of an isolated child: this checkout first on PYTHONPATH, and the parent's pid."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[PARENT_ENV] = str(os.getpid())
    return env


def die_with_parent(folder: Path) -> None:
    """In the child: on the parent's death (Linux PR_SET_PDEATHSIG -> SIGTERM) remove `folder` and exit at once."""
    import shutil

    def on_parent_death(signum: int, frame: Any) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_parent_death)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):  # the parent died before the prctl above
        on_parent_death(signal.SIGTERM, None)


def main(argv: list[str]) -> int:
    """The child: read IN (cell and job), measure, write the row to OUT."""
    from harness.executors.worker import run_cell

    request, result = Path(argv[0]), Path(argv[1])
    die_with_parent(request.parent)
    data = json.loads(request.read_text(encoding="utf-8"))
    row = run_cell(data["cell"], CellJob.from_dict(data["job"]))
    result.write_text(json.dumps(row, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
