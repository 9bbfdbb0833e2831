"""The memory budget search of a sweep (SweepSpec.memory_budget): after the planned cells, for each train series
(variant x recompute x precision x the other settings) the longest N whose peak memory fits the budget.

The search itself is pure (harness.plan.search_longest: doubling N from the planned lengths, then bisection); this
drives it in rounds, one N per unfinished series per round, through the sweep's own executor and row writer, so each
row is appended as it arrives (nothing measured is lost) and cells already measured, planned or searched, are reused:
a resumed run walks the same path from the rows it has.
"""

from __future__ import annotations

import sys
from typing import Callable, Mapping

from harness.devices import device_memory_bytes
from harness.plan import length_series, memory_verdict, search_longest
from harness.row import Row
from harness.schema import Cell
from harness.spec import SweepSpec


def budget_bytes(spec: SweepSpec) -> int | None:
    """The spec's memory budget in bytes ('device': the device's memory), None without one."""
    if spec.memory_budget == "device":
        return device_memory_bytes(spec.device)
    return spec.memory_budget


def searched_series(spec: SweepSpec) -> list[Callable[[int], Cell]]:
    """The series the search walks: the plan's train series (the question is the longest N that trains)."""
    return [at for at in length_series(spec) if at(min(spec.seq_lens)).mode == "train"]


def search_memory_budget(
    spec: SweepSpec, budget: int, rows: Mapping[str, Row], measure: Callable[[list[Cell]], None]
) -> None:
    """Measure the search's cells until every series' search is over; `rows` (cell_id -> row) holds every row so far
    and grows as measure(cells) appends theirs."""
    series, start = searched_series(spec), sorted(spec.seq_lens)
    while True:
        probes = []
        for at in series:

            def verdict(n: int, at: Callable[[int], Cell] = at) -> str | None | bool:
                row = rows.get(at(n).cell_id)
                return False if row is None else memory_verdict(row.status, row.peak_memory_bytes, budget)

            found = search_longest(verdict, start)
            if found.next is not None:
                probes.append(at(found.next))
        if not probes:
            return
        measure(probes)
        if any(cell.cell_id not in rows for cell in probes):  # never loop on a cell that got no row
            print("warning: the memory budget search stopped: a searched cell got no row", file=sys.stderr)
            return
