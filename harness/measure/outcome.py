"""What becomes of a failure: the status and reason of an exception a cell raised, the per-cell deadline (and the fit's
limit within it), clean-up after a failure. The speed-up's baseline is judged by the same rules (harness.measure.speedup).
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from typing import Any, Iterator

import torch

from harness.measure.timer import Stopwatch
from variants import NotSupportedError


class CellTimeout(Exception):
    """The cell ran past its limit."""


class FitTimeout(Exception):
    """A cell's error-budget search or calibration ran past its own limit (fit_timeout_s): no verdict on the variant."""


def classify_exception(exc: BaseException, timeout_s: float | None = None) -> tuple[str, str]:
    """(status, reason) for an exception raised inside a cell."""
    message = f"{type(exc).__name__}: {exc}".strip()
    if len(message) > 2000:
        message = message[:2000] + " ..."
    if isinstance(exc, CellTimeout):
        return "timeout", f"cell ran past its limit of {timeout_s:g} s" if timeout_s else "cell ran past its limit"
    if isinstance(exc, FitTimeout):
        return "fit_timeout", str(exc)
    if isinstance(exc, NotSupportedError):
        return "unsupported", "; ".join(exc.reasons)
    if is_oom(exc):
        return "oom", message
    return "error", message


def is_oom(exc: BaseException) -> bool:
    """CUDA OutOfMemoryError, MemoryError, or a RuntimeError from an allocator that ran out."""
    cuda_oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if cuda_oom is not None and isinstance(exc, cuda_oom):
        return True
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return "out of memory" in text or ("alloc" in text and ("memory" in text or "bytes" in text))
    return False


def release_memory(device: str) -> None:
    """Collect garbage (and the CUDA cache) after a failure."""
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


class Deadline:
    """A cell's clock: SIGALRM raises CellTimeout after the cell's seconds, not counting the sections run under
    `fitting()` (the search and calibration), which have a limit of their own for the whole cell (fit_s)."""

    def __init__(self, fit_s: float | None, armed: bool):
        self.fit_left = fit_s  # seconds of fitting left to this cell (None: no limit)
        self.fit_s = fit_s
        self.armed = armed  # signals work here (main thread, setitimer): else no limit is enforced

    @contextlib.contextmanager
    def fitting(self, what: str) -> Iterator[None]:
        """Run `what` (a search, a calibration) outside the cell's limit and within the fit's; FitTimeout past it."""
        if not self.armed:
            yield
            return
        cell_left, _ = signal.setitimer(signal.ITIMER_REAL, 0)  # the cell's clock stops
        if self.fit_left is not None and self.fit_left <= 0:
            self._resume(cell_left)
            raise FitTimeout(self._reason(what))

        def expire(signum: int, frame: Any) -> None:
            raise FitTimeout(self._reason(what))

        previous = signal.signal(signal.SIGALRM, expire)
        watch = Stopwatch.started()
        if self.fit_left is not None:
            signal.setitimer(signal.ITIMER_REAL, self.fit_left)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if self.fit_left is not None:
                self.fit_left -= watch.seconds
            self._resume(cell_left)

    def _reason(self, what: str) -> str:
        return (
            f"{what} ran past its own limit of {self.fit_s:g} s (fit_timeout_s), so the variant has no verdict here; "
            "raise fit_timeout_s (the cell's own limit does not count this time)"
        )

    @staticmethod
    def _resume(cell_left: float) -> None:
        if cell_left > 0:  # 0: the cell has no limit
            signal.setitimer(signal.ITIMER_REAL, cell_left)


@contextlib.contextmanager
def deadline(seconds: float | None, fit_seconds: float | None = None) -> Iterator[Deadline]:
    """Raise CellTimeout in this (main) thread after `seconds` (a running native call finishes first); the sections the
    Deadline yielded runs under `fitting()` do not count and have `fit_seconds` of their own (FitTimeout)."""
    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not armed:
        yield Deadline(fit_seconds, False)
        return

    def expire(signum: int, frame: Any) -> None:
        raise CellTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    if seconds:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield Deadline(fit_seconds, True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
