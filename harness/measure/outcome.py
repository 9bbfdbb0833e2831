"""What becomes of a cell: its named stages and the fields of those that finished, the status and reason of an
exception, the per-cell deadline, clean-up.

Stages: Named stages of a cell, and the fields of the ones that finished.

stage(name) runs a block as a named stage: an exception inside it is re-raised as StageFailed, so the
row's reason says during which stage the cell failed. Each stage returns its row fields (a dict, or an
object holding one); the cell's orchestration hands them to a StageRecorder as each stage finishes, so a
cell that fails later still reports what its earlier stages measured (backend, errors, memory). Nothing
is written into a caller's dict and nothing is hung on an exception.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

import torch

from harness.measure.settings import RunInfo
from harness.measure.timer import Stopwatch
from harness.row import Row
from harness.schema import Cell
from variants import NotSupportedError


class CellTimeout(Exception):
    """The cell ran past its limit."""


class FitTimeout(Exception):
    """A cell's error-budget search or calibration ran past its own limit (fit_timeout_s): no verdict on the variant."""


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


class StageFailed(Exception):
    """An exception raised inside a named stage of a cell (the stage goes into the reason)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage)
        self.stage, self.error = stage, error


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run a block as stage `name`: any failure but the user's Ctrl-C is re-raised as StageFailed(name, error)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        if by_user(exc):  # Ctrl-C stops the sweep; a SystemExit or KeyboardInterrupt raised by a variant is a row
            raise
        raise StageFailed(name, exc) from exc


class StageRecorder:
    """The row fields a cell's stages returned, kept as each finishes: what its row has whether or not a later stage fails."""

    def __init__(self) -> None:
        self._fields: dict[str, Any] = {}

    def record(self, fields: Mapping[str, Any]) -> None:
        """Keep a stage's fields (a field a later stage returns again takes the later value)."""
        self._fields.update(fields)

    @property
    def fields(self) -> dict[str, Any]:
        """A copy of every field recorded so far."""
        return dict(self._fields)

    def outcome(self, status: str, reason: str | None = None, **fields: Any) -> dict[str, Any]:
        """The cell's measured fields: those recorded, then the last stage's `fields`, its status and reason."""
        return {**self._fields, **fields, "status": status, "reason": reason}
