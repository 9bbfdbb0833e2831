"""Executors: where a sweep's cells run. They only move cells out and rows back; measuring is one function.

- ``local`` (default): in the driver, one cell after another (concurrent cells on one device would
  spoil each other's timings).
- ``subprocess``: each cell in a fresh child process on this machine (a segfault becomes a row).
- ``ray``: Ray core tasks, one whole GPU per cell (``num_gpus=1``), or ``cpus_per_cell`` CPUs on CPU sweeps.
- ``slurm``: submitit job arrays on a Slurm cluster (or submitit's local mode).

Every executor runs :func:`harness.executors.worker.run_cell` for a cell; the driver
(:func:`run_cells`) pulls cells lazily in plan order, keeps at most ``executor.slots`` in
flight, hands each finished row to the sweep (the only writer of rows.jsonl) and, after an
OOM or timeout, drops queued longer cells of the same series. A lost task (a killed worker, a
node gone, a cell past its hard limit) comes back as a row too, so the driver never waits forever.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable, Iterable

from harness.executors.worker import CellJob

# name -> (module, class name, one line for --help)
EXECUTORS: dict[str, tuple[str, str, str]] = {
    "local": ("harness.executors.local", "LocalExecutor", "in this process, one cell after another (default)"),
    "subprocess": ("harness.executors.subprocess", "SubprocessExecutor", "each cell in its own process on this machine"),
    "ray": ("harness.executors.ray", "RayExecutor", "Ray tasks: one GPU (or --cpus-per-cell CPUs) per cell"),
    "slurm": ("harness.executors.slurm", "SlurmExecutor", "submitit job arrays on a Slurm cluster"),
}
REMOTE = ("ray", "slurm")  # executors whose cells run on other machines (they pick each cell's device)
# executor -> (the package it imports, how to install it)
PACKAGES = {"ray": ("ray", "pip install 'attnsuite[ray]'"), "slurm": ("submitit", "pip install 'attnsuite[slurm]'")}
STARTUP_SLACK_S = 60.0  # a worker's own start-up (importing torch) on top of a cell's limit
POLL_S = 0.5  # how long the driver waits for a row before it looks at limits and queues again


def missing_package(executor: str) -> str | None:
    """One line naming the install command when `executor` needs a package that is not installed, else None."""
    if executor not in PACKAGES:
        return None
    module, install = PACKAGES[executor]
    if importlib.util.find_spec(module) is not None:
        return None
    return f"--executor {executor} needs the {module!r} package, which is not installed here; {install}"


def hard_limit_s(cell_timeout_s: float | None) -> float | None:
    """Seconds after which the driver gives up on a running cell (the worker's own limit fires first)."""
    return None if cell_timeout_s is None else cell_timeout_s * 1.5 + STARTUP_SLACK_S


class Executor:
    """Runs cells somewhere and returns their rows. Subclasses implement submit/poll (and close, queued, cancel)."""

    name = "base"

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
    def from_spec(cls, spec: Any, job: CellJob) -> "SequentialExecutor":
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


def make_executor(spec: Any, job: CellJob) -> Executor:
    """The executor the spec names (spec.executor), configured from the spec's executor fields."""
    module_name, class_name, _ = EXECUTORS[spec.executor]
    return getattr(importlib.import_module(module_name), class_name).from_spec(spec, job)


def run_cells(
    executor: Executor,
    cells: Iterable[Any],
    *,
    skip: Callable[[Any], dict[str, Any] | None],
    on_row: Callable[[Any, dict[str, Any], bool], None],
    on_start: Callable[[Any], None] = lambda cell: None,
) -> None:
    """Drive `executor` over `cells` (pulled lazily, in order) until every cell has a row.

    skip(cell): a "not run" row for a cell that should not run (now), else None; asked when a cell
    is pulled and again for queued cells after each row. on_row(cell, row, measured) is called once
    per cell, as rows arrive; on_start(cell) when a cell is handed to the executor.
    """
    pending = iter(cells)
    exhausted = False
    while True:
        batch: list[Any] = []
        while not exhausted and (executor.slots is None or executor.in_flight + len(batch) < executor.slots):
            cell = next(pending, None)
            if cell is None:
                exhausted = True
                break
            outcome = skip(cell)
            if outcome is not None:
                on_row(cell, outcome, False)
                continue
            batch.append(cell)
        if batch:
            for cell in batch:
                on_start(cell)
            executor.submit(batch)
        if executor.in_flight == 0:
            if exhausted:
                return
            continue
        for cell, row in executor.poll(POLL_S):
            on_row(cell, row, True)
        doomed = [cell for cell in executor.queued() if skip(cell) is not None]
        for cell in executor.cancel_queued(doomed) if doomed else ():
            on_row(cell, skip(cell), False)
