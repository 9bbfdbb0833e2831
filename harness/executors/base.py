"""The executor interface: submit cells, poll rows; and the options every parallel executor shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.devices import device_problem
from harness.executors.worker import CellJob
from harness.knobs import knob
from harness.measure import RunInfo, outcome_row
from harness.spec import convert as c

STARTUP_SLACK_S = 60.0  # a worker's own start-up (importing torch) on top of a cell's limit


def hard_limit_s(cell_timeout_s: float | None, fit_timeout_s: float | None = None) -> float | None:
    """Seconds after which the driver gives up on a running cell (the worker's own limits fire first): the cell's
    limit plus its search and calibration's (fit_timeout_s), which the cell's does not count."""
    if cell_timeout_s is None:
        return None
    return (cell_timeout_s + (fit_timeout_s or 0.0)) * 1.5 + STARTUP_SLACK_S


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """An executor without options of its own."""


@dataclass(frozen=True, kw_only=True)
class ParallelOptions:
    """Options of executors that run several cells at once (ray, slurm)."""

    cpus_per_cell: int = knob(
        1,
        flag="--cpus-per-cell",
        metavar="K",
        group="where",
        parse=c.positive_int,
        help="ray, slurm: CPUs per cell (default 1; a CPU cell's torch threads)",
    )
    max_parallel: int | None = knob(
        None,
        flag="--max-parallel",
        metavar="N",
        group="where",
        parse=c.optional_int(1),
        help="ray, slurm: most cells running at once (ray default: every GPU, or CPUs // K; slurm: the array limit, default 256)",
    )


class Executor:
    """Runs cells somewhere and returns their rows. Subclasses implement submit/poll (and close, queued, cancel)."""

    name = "base"
    job: CellJob  # what its workers get besides the cell (set by each executor's constructor)
    options: type = NoOptions  # the dataclass of this executor's own options (knob fields)
    package: tuple[str, str] | None = None  # (module it imports, how to install it)
    remote = False  # cells run on other machines, which pick each cell's device

    @classmethod
    def check(cls, spec: Any, options: Any, *, plan_only: bool) -> None:
        """Refuse (SpecError naming the setting) what this executor cannot do with this spec; default: the device must be here."""
        # an index names a device of this machine: checked even when only planning ('cuda' plans for any machine)
        problem = device_problem(spec.device, present=not plan_only or ":" in spec.device)
        if problem:
            raise c.SpecError(f"{spec.where('device')}: {problem}")

    @property
    def slots(self) -> int | None:
        """How many cells to keep in flight; None: hand over every cell at once (the engine queues them)."""
        return 1

    @property
    def in_flight(self) -> int:
        raise NotImplementedError

    def submit(self, cells: list[Any]) -> None:
        """Start `cells` (Cell objects); their rows come back from poll()."""
        raise NotImplementedError

    def poll(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        """(cell, row) for every cell finished within `timeout` seconds (failures and lost tasks included)."""
        raise NotImplementedError

    def queued(self) -> list[Any]:
        """Submitted cells known not to have started (they can still be dropped)."""
        return []

    def cancel_queued(self, cells: list[Any]) -> list[Any]:
        """Drop these queued cells; returns those actually dropped (no row will come back for them)."""
        return []

    def close(self) -> None:
        """Stop what is still running and release the engine (called on success, error and Ctrl-C)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SequentialExecutor(Executor):
    """One cell at a time on this machine, measured when polled (concurrent cells would spoil each other's timings).

    Subclasses implement ``measure(cell) -> row``.
    """

    def __init__(self, job: CellJob):
        self.job = job
        self._cells: list[Any] = []

    @classmethod
    def from_spec(cls, spec: Any, options: Any, job: CellJob) -> "SequentialExecutor":
        return cls(job)

    @property
    def in_flight(self) -> int:
        return len(self._cells)

    def submit(self, cells: list[Any]) -> None:
        self._cells.extend(cells)

    def poll(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        """Measure the next cell now (the timeout does not apply: the cell's own limit does)."""
        cell = self._cells.pop(0)
        return [(cell, self.measure(cell))]

    def measure(self, cell: Any) -> dict[str, Any]:
        """The row of one cell."""
        raise NotImplementedError


def row_of(cell: Any, row: Any, run: dict[str, Any]) -> dict[str, Any]:
    """`row` when it is the row of `cell` (the same cell_id), else an `error` row of `cell` naming the mismatch: a row
    a worker sends back (forged by a plugin, or shifted onto the next cell) never lands on a cell it was not for."""
    got = row.get("cell_id") if isinstance(row, dict) else None
    if got == cell.cell_id:
        return row
    reason = (
        f"the row sent back for cell {cell.cell_id} is for cell {got!r} (forged or shifted by code in the worker, "
        "such as a plugin); refused"
    )
    return outcome_row(cell, RunInfo(**run), "error", reason)


def check_remote_device(spec: Any, executor: str) -> None:
    """A remote executor gives each cell its own GPU: a device index would mean nothing there."""
    if spec.device.partition(":")[2]:
        raise c.SpecError(
            f"{spec.where('device')}: {spec.device!r} with --executor {executor}: {executor} gives each cell "
            "its own GPU; use --device cuda"
        )
    problem = device_problem(spec.device, present=False)
    if problem:
        raise c.SpecError(f"{spec.where('device')}: {problem}")
