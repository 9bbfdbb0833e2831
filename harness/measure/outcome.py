"""What becomes of a cell that fails: the status and reason of an exception, the per-cell deadline, clean-up."""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from datetime import datetime, timezone
from typing import Any, Iterator

import torch

from harness.measure.settings import RunInfo
from harness.row import Row
from harness.schema import Cell


class CellTimeout(Exception):
    """The cell ran past its limit."""


def now() -> str:
    """The current time as ISO text (UTC, seconds): a row's started_at."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def base_row(cell: Cell, run: RunInfo) -> Row:
    """A row with the cell's and the run's identity filled in and every measurement None."""
    return Row.for_cell(
        cell,
        run_id=run.run_id,
        device_name=run.device_name,
        host=run.host,
        threads=run.threads,
        accuracy_reference=run.accuracy_reference,
    )


def outcome_row(cell: Cell, run: RunInfo, status: str, reason: str | None) -> dict[str, Any]:
    """The row (as a dict) of a cell that was not measured, e.g. OOM at a shorter N: status and reason only."""
    return base_row(cell, run).update(status=status, reason=reason, started_at=now(), wall_s=0.0).to_dict()


def classify_exception(exc: BaseException, timeout_s: float | None = None) -> tuple[str, str]:
    """(status, reason) for an exception raised inside a cell."""
    from variants import NotSupportedError

    message = f"{type(exc).__name__}: {exc}".strip()
    if len(message) > 2000:
        message = message[:2000] + " ..."
    if isinstance(exc, CellTimeout):
        return "timeout", f"cell ran past its limit of {timeout_s:g} s" if timeout_s else "cell ran past its limit"
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


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise CellTimeout in this (main) thread after `seconds`; a running native call finishes first."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CellTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_SIGINT = {"installed": False, "pressed": False}  # whether this process's Ctrl-C is being watched, and was pressed


@contextlib.contextmanager
def user_interrupts() -> Iterator[None]:
    """Watch for the user's Ctrl-C (SIGINT) while a cell runs, so a KeyboardInterrupt a variant raises itself can be
    told apart (harness.measure.outcome.by_user) and become an error row. Main thread only; elsewhere every
    KeyboardInterrupt counts as the user's."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def pressed(signum: int, frame: Any) -> None:
        _SIGINT["pressed"] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, pressed)
    _SIGINT.update(installed=True, pressed=False)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _SIGINT["installed"] = False


def by_user(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt that comes from the user's Ctrl-C (or cannot be told apart: no watch installed)."""
    return isinstance(exc, KeyboardInterrupt) and (_SIGINT["pressed"] or not _SIGINT["installed"])
