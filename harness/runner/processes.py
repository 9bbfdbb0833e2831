"""A sweep's later timing processes (--processes P): each paired cell timed again in P-1 fresh processes, its interval
over all P.

Inside one process a cell's rounds agree to 1-2%; from one process to the next the same cell moved by 11% and more on
a quiet shared machine (docs/timing.md, "Sources of the spread"): the state a process lands in is the largest term, and
no interval measured inside one process can hold the next run. So, as pyperf spreads a benchmark over worker
processes, the sweep's cells are first measured as always (every row written as it finishes), then for p = 2..P a
fresh child (harness.child, harness.executors.worker.retime_in_process) times every ok paired cell again, in plan
order: the same inputs, the config its row measured, the run's stored fit (harness.measure.retime). Each timing is
appended to RUN_DIR/process_timings.jsonl as it arrives; at the end every such row gets its speed-up (or the
baseline's reference_speedup) and interval over its processes (harness.measure.rounds.process_interval), rows.jsonl
rewritten whole (harness.safe_files.write_plain: renamed over it, never half written). A budget cell that took another
cell's measurement (tuning.measured_with) takes that cell's merged timing. A cell a later process could not time keeps
the processes that did (the row's `processes` says how many); a run stopped before the merge keeps its first
process's rows and the timings file.

Remote executors (Ray, Slurm) are not re-timed: their cells already land in processes of their own.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

from harness.child import ChildFailed, ChildProcess
from harness.executors import executor_class
from harness.executors.base import hard_limit_s
from harness.executors.isolated import cell_temp_root
from harness.executors.worker import RETIME_SERVER, CellJob
from harness.measure.roofline import WIDE_INTERVAL
from harness.measure.rounds import ProcessTiming, process_interval
from harness.row import Row
from harness.safe_files import open_plain, write_plain
from harness.spec import SweepSpec
from harness.store import ROWS_FILE, read_rows

TIMINGS_FILE = "process_timings.jsonl"  # one line per later process's timing of a cell, as it arrives
PAIRED = (("speedup", ""), ("reference_speedup", "reference_"))  # (value field, its interval's prefix)


def time_in_processes(run_dir: Path, spec: SweepSpec, job: CellJob, rows: dict[str, Row], *, quiet: bool) -> None:
    """Time the run's paired ok rows in spec.processes - 1 more processes and merge (see the module doc)."""
    todo = [row for row in rows.values() if _own_timing(row)]
    if spec.processes < 2 or not todo or executor_class(spec.executor).remote:
        return
    timings = {row.cell_id: [_first(row)] for row in todo}
    limit = hard_limit_s(job.settings.get("cell_timeout_s"), None)
    with open_plain(run_dir / TIMINGS_FILE, "a") as log:
        for process in range(2, spec.processes + 1):
            if not quiet:
                print(f"timing {len(todo)} paired cells in process {process} of {spec.processes}", file=sys.stderr)
            for row, reply in zip(todo, _retimed(todo, job, process, limit)):
                log.write(json.dumps({"cell_id": row.cell_id, "process": process, **reply}) + "\n")
                log.flush()
                if reply["timing"]:
                    timings[row.cell_id].append(reply["timing"])
    merged = {
        cell_id: row.update(**merged_fields(row, timings[cell_id]))
        for cell_id, row in rows.items()
        if cell_id in timings
    }
    for row in rows.values():  # a budget cell that took another's measurement takes its merged timing too
        source = merged.get(_shared_from(row))
        if source is not None and row.cell_id not in merged:
            merged[row.cell_id] = row.update(**{name: getattr(source, name) for name in TIMING_FIELDS})
    rewrite_rows(run_dir, merged)


def _retimed(todo: list[Row], job: CellJob, process: int, limit: float | None) -> Iterable[dict[str, Any]]:
    """One fresh child's reply for each row's cell, in order: {"timing": fields or None, "failed": why or None}."""
    with ChildProcess(
        RETIME_SERVER, job.to_dict(), name=f"timing process {process}", result="timing", temp_root=cell_temp_root(job)
    ) as child:
        for row in todo:
            try:
                yield child.run(asdict(row.cell), limit)
            except ChildFailed as failed:  # the next cell starts the child again
                yield {"timing": None, "failed": f"{failed.status}: {failed.reason}"}


def _own_timing(row: Row) -> bool:
    """An ok row timed in pairs by its own cell in one process so far (not a budget cell that took another cell's
    measurement, nor a row of a resumed run merged before)."""
    paired = row.speedup is not None or row.reference_speedup is not None
    return row.status == "ok" and paired and _shared_from(row) is None and (row.processes or 1) == 1


def _shared_from(row: Row) -> str | None:
    """The cell id whose measurement a budget cell took (tuning.measured_with), else None."""
    return (row.tuning or {}).get("measured_with")


def _first(row: Row) -> dict[str, Any]:
    """The row's own (first process's) timing fields, as a later process reports them."""
    return {name: getattr(row, name) for name in TIMING_FIELDS}


TIMING_FIELDS = (
    "speedup",
    "speedup_low",
    "speedup_high",
    "reference_speedup",
    "reference_speedup_low",
    "reference_speedup_high",
    "rounds",
    "processes",
    "speedup_process_sd",
    "noisy",
    "noise_reason",
)


def merged_fields(row: Row, timings: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's paired fields over its processes' `timings` (the first the row's own): the speed-up (or
    reference_speedup) and its interval from process_interval, rounds summed, processes, speedup_process_sd; a merged
    interval wider than WIDE_INTERVAL makes the row noisy, with the reason. {} when fewer than two processes timed it."""
    for value, prefix in PAIRED:
        got = [_process_timing(t, value, prefix) for t in timings]
        got = [t for t in got if t is not None]
        if getattr(row, value) is None or len(got) < 2:
            continue
        interval = process_interval(got)
        fields = {
            value: interval.speedup,
            f"{prefix}speedup_low": interval.low,
            f"{prefix}speedup_high": interval.high,
            "rounds": interval.rounds,
            "processes": interval.processes,
            "speedup_process_sd": interval.process_sd,
        }
        if interval.high / interval.low > WIDE_INTERVAL:
            reason = f"{prefix.replace('_', ' ')}speed-up over {interval.processes} processes wide ({interval.low:.3g}-{interval.high:.3g})"
            fields.update(noisy=True, noise_reason="; ".join(filter(None, [reason, row.noise_reason])))
        return fields
    return {}


def _process_timing(timing: dict[str, Any], value: str, prefix: str) -> ProcessTiming | None:
    speedup, low, high = timing.get(value), timing.get(f"{prefix}speedup_low"), timing.get(f"{prefix}speedup_high")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (speedup, low, high)):
        return None
    return ProcessTiming(speedup, low, high, timing.get("rounds"))


def rewrite_rows(run_dir: Path, merged: dict[str, Row]) -> None:
    """rows.jsonl with the `merged` rows in place of those of their cell ids, the rest and the order as they were."""
    if not merged:
        return
    records = [merged[r["cell_id"]].to_dict() if r["cell_id"] in merged else r for r in read_rows(run_dir)]
    write_plain(run_dir / ROWS_FILE, "".join(json.dumps(r, allow_nan=False, default=str) + "\n" for r in records))
