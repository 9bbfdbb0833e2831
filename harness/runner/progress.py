"""A one-line progress bar on stderr: cells done/total, ETA, the current cell. Silent when not a terminal."""
from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class Progress:
    """Redraws one stderr line per update; does nothing when disabled or when the stream is not a TTY."""

    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total
        self.done = 0
        self._start = time.monotonic()
        self._measured = 0  # cells actually measured (skipped ones are instant and would skew the ETA)
        self._measured_s = 0.0

    def start(self, label: str) -> None:
        """Show the cell about to run."""
        self._cell_start = time.monotonic()
        self._draw(label)

    def finish(self, status: str, *, measured: bool = True) -> None:
        """Count the cell just finished."""
        self.done += 1
        if measured:
            self._measured += 1
            self._measured_s += time.monotonic() - getattr(self, "_cell_start", time.monotonic())
        self._draw(status)

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _draw(self, label: str) -> None:
        if not self.enabled:
            return
        width = shutil.get_terminal_size((100, 20)).columns
        fraction = self.done / self.total if self.total else 1.0
        eta = ""
        if self._measured:
            remaining = (self._measured_s / self._measured) * (self.total - self.done)
            eta = f" ETA {_duration(remaining)}"
        bar_width = 20
        filled = int(bar_width * fraction)
        text = f"[{'#' * filled}{'.' * (bar_width - filled)}] {self.done}/{self.total}{eta}  {label}"
        self.stream.write("\r\033[K" + text[: width - 1])
        self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
