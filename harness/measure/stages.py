"""Named stages of a cell, and the fields of the ones that finished.

stage(name) runs a block as a named stage: an exception inside it is re-raised as StageFailed, so the
row's reason says during which stage the cell failed. Each stage returns its row fields (a dict, or an
object holding one); the cell's orchestration hands them to a StageRecorder as each stage finishes, so a
cell that fails later still reports what its earlier stages measured (backend, errors, memory). Nothing
is written into a caller's dict and nothing is hung on an exception.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

from harness.measure.outcome import by_user


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
