"""Tests marked `serial` run alone under pytest-xdist: a readers-writer lock the workers share (flock on two files).

Every other test holds the run lock shared, a serial test holds it alone. A serial test first closes the gate, so the
workers' next tests wait at it while the running ones finish; without the gate a worker that releases and takes the
shared lock between its tests could keep the serial test waiting for ever.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

LOCKS_ENV = "ATTNSUITE_TEST_LOCKS"  # the folder of the lock files, made by the controller for its workers


@contextlib.contextmanager
def holding(folder: Path, *, alone: bool) -> Iterator[None]:
    """Hold the run lock of the workers sharing `folder` while the block runs: alone (a serial test) or shared."""
    with open(folder / "gate", "a") as gate, open(folder / "run", "a") as run:
        if alone:
            fcntl.flock(gate, fcntl.LOCK_EX)  # no new test starts ...
            fcntl.flock(run, fcntl.LOCK_EX)  # ... and the running ones have finished
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(run, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
