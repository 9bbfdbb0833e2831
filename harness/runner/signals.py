"""SIGTERM during a sweep: the driver stops as on Ctrl-C (rows kept, the lock's pid removed, the executor closed)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from harness.errors import Terminated


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """For the block, SIGTERM raises harness.errors.Terminated (a KeyboardInterrupt) in this, the main, thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
