"""Named stages of a cell: an exception inside one carries the stage's name into the row's reason."""
from __future__ import annotations

import contextlib
from typing import Iterator


class StageFailed(Exception):
    """An exception raised inside a named stage of a cell (the stage goes into the reason)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage)
        self.stage, self.error = stage, error
        self.measured: dict = {}  # the row fields measured before the failure (set by the cell's orchestration)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run a block as stage `name`: any failure but Ctrl-C is re-raised as StageFailed(name, error)."""
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C stops the sweep; a SystemExit from a variant (sys.exit, exit()) is a row
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        raise StageFailed(name, exc) from exc
