"""One writer per run folder: an exclusive ``flock`` on RUN_DIR/.lock, holding the writer's pid.

A sweep and a resume take it before they read what is done and hold it until the last row and
table are written, so two writers never append the same cells. The OS drops the lock when its
process dies (SIGKILL included): a stale .lock file never blocks. Readers (report, compare) take
no lock. Where ``fcntl`` is missing (Windows) there is no lock.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from harness.errors import UsageError
from harness.safe_files import open_plain

LOCK_FILE = ".lock"


@contextlib.contextmanager
def lock_run_dir(run_dir: str | Path) -> Iterator[None]:
    """Hold the run folder's write lock for the block; UsageError naming the holder's pid when another process has it."""
    try:
        import fcntl  # POSIX only: elsewhere there is no flock
    except ImportError:  # no flock here: one writer is then the user's to ensure
        yield
        return
    path = Path(run_dir) / LOCK_FILE
    lock = open_plain(path, "rw", binary=True)  # never through a symbolic link
    fd = lock.fileno()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise UsageError(
                f"run folder {run_dir} is being written by another sweep (pid {holder}, lock {path}); "
                "wait for it to finish or stop it, then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # the pid is only there while it holds the lock
    finally:
        lock.close()  # closing the descriptor releases the lock
