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
cell's measurement (tuning.measured_with) takes that cell's merged timing. A cell fewer than three processes timed (a
later one could not: its reason is in the timings file) keeps its first process's interval and says so in its
noise_reason; a later process whose child cannot start ends that pass; any other failure of the passes is a warning,
and the rows are merged from what was timed. A run stopped before the merge keeps its first process's rows, and
`--resume` times them again.

Remote executors (Ray, Slurm) are not re-timed: their cells already land in processes of their own.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

from harness.child import ChildFailed, ChildProcess
from harness.executors import executor_class
from harness.executors.base import hard_limit_s
from harness.executors.isolated import cell_temp_root, clean_cell_temp
from harness.executors.worker import RETIME_SERVER, CellJob
from harness.measure.context import measured_with
from harness.measure.roofline import interval_rejudged
from harness.measure.rounds import ProcessTiming, process_interval
from harness.row import Row
from harness.safe_files import open_plain, write_plain
from harness.spec import SweepSpec
from harness.store import ROWS_FILE, read_rows

TIMINGS_FILE = "process_timings.jsonl"  # one line per later process's timing of a cell, as it arrives
PAIRED = (("speedup", ""), ("reference_speedup", "reference_"))  # (value field, its interval's prefix)
MIN_PROCESSES = 3  # fewer timings give a t quantile of 12.7 or none: the row keeps its first process's interval


def later_processes(spec: SweepSpec) -> int:
    """How many processes time the paired cells again after the sweep: spec.processes - 1, none for a remote
    executor (its cells land in processes of their own)."""
    return 0 if executor_class(spec.executor).remote else max(spec.processes - 1, 0)


def time_in_processes(run_dir: Path, spec: SweepSpec, job: CellJob, rows: dict[str, Row], *, quiet: bool) -> None:
    """Time the run's paired ok rows in later_processes(spec) more processes and merge (see the module doc)."""
    todo = [row for row in rows.values() if _own_timing(row)]
    if not later_processes(spec) or not todo:
        return
    timings = {row.cell_id: [_first(row)] for row in todo}
    try:
        _later_processes(run_dir, spec, job, todo, timings, quiet)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - the rows are measured: merge what was timed, say what failed
        warnings.warn(f"attnsuite: the later timing processes stopped ({type(exc).__name__}: {exc})", stacklevel=2)
    finally:
        clean_cell_temp(run_dir)  # the children's temp folders: a finished run folder holds no .cells
    merged = {cell_id: row.update(**merged_fields(row, timings[cell_id], spec.processes)) for cell_id, row in rows.items() if cell_id in timings}  # fmt: skip
    for row in rows.values():  # a budget cell that took another's measurement takes its merged timing too
        source = merged.get(measured_with(row.tuning))
        if source is not None and row.cell_id not in merged:
            merged[row.cell_id] = row.update(**{name: getattr(source, name) for name in TIMING_FIELDS})
    rewrite_rows(run_dir, merged)


def _later_processes(
    run_dir: Path, spec: SweepSpec, job: CellJob, todo: list[Row], timings: dict[str, list], quiet: bool
) -> None:
    """Processes 2..P, each a fresh child timing every row of `todo` in order; each reply appended to the timings file
    as it arrives and, when timed, to the row's `timings`."""
    limit = hard_limit_s(job.settings.get("cell_timeout_s"), None)
    with open_plain(run_dir / TIMINGS_FILE, "a") as log:
        for process in range(2, spec.processes + 1):
            if not quiet:
                print(f"timing {len(todo)} paired cells in process {process} of {spec.processes}", file=sys.stderr)
            for row, reply in zip(todo, _retimed(todo, job, process, limit)):
                line = {"cell_id": row.cell_id, "process": process, **reply}
                log.write(json.dumps(line, allow_nan=False, default=str) + "\n")
                log.flush()
                if reply["timing"]:
                    timings[row.cell_id].append(reply["timing"])


def _retimed(todo: list[Row], job: CellJob, process: int, limit: float | None) -> Iterable[dict[str, Any]]:
    """One fresh child's reply for each row's cell, in order: {"timing": fields or None, "failed": why or None}. A child
    that dies is started again for the next cell; one that cannot start ends the pass (each cell told so)."""
    with ChildProcess(
        RETIME_SERVER, job.to_dict(), name=f"timing process {process}", result="timing", temp_root=cell_temp_root(job)
    ) as child:
        for index, row in enumerate(todo):
            try:
                yield child.run(asdict(row.cell), limit)
            except ChildFailed as failed:
                yield {"timing": None, "failed": f"{failed.status}: {failed.reason}"}
                if not failed.started:
                    for _ in todo[index + 1 :]:
                        yield {"timing": None, "failed": f"process {process} did not start: {failed.reason}"}
                    return


def _own_timing(row: Row) -> bool:
    """An ok row timed in pairs by its own cell in one process so far (not a budget cell that took another cell's
    measurement, nor a row of a resumed run merged before)."""
    paired = row.speedup is not None or row.reference_speedup is not None
    return row.status == "ok" and paired and measured_with(row.tuning) is None and (row.processes or 1) == 1


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
    "speedup_round_sd",
    "processes",
    "speedup_process_sd",
    "noisy",
    "noise_reason",
)


def merged_fields(row: Row, timings: list[dict[str, Any]], asked: int) -> dict[str, Any]:
    """The row's paired fields over its processes' `timings` (the first the row's own; `asked` processes were asked
    for): the speed-up (or reference_speedup) and its interval from process_interval, rounds summed, processes,
    speedup_process_sd, noisy and noise_reason judged again (harness.measure.roofline.interval_rejudged). Fewer than
    MIN_PROCESSES usable timings: the row as it was, its noise_reason saying so."""
    for value, prefix in PAIRED:
        if getattr(row, value) is None:
            continue
        got = [t for t in (_process_timing(t, value, prefix) for t in timings) if t is not None]
        if len(got) < MIN_PROCESSES:
            note = f"timed in {len(got)} of {asked} processes (the others' reasons: {TIMINGS_FILE}): one process's interval"
            return {"noise_reason": "; ".join(filter(None, [row.noise_reason, note]))}
        interval = process_interval(got)
        return {
            value: interval.speedup,
            f"{prefix}speedup_low": interval.low,
            f"{prefix}speedup_high": interval.high,
            "rounds": interval.rounds,
            "processes": interval.processes,
            "speedup_process_sd": interval.process_sd,
            **interval_rejudged(row.noise_reason, interval.low, interval.high, interval.processes, prefix.replace("_", " ")),
        }  # fmt: skip
    return {}


def _process_timing(timing: dict[str, Any], value: str, prefix: str) -> ProcessTiming | None:
    """One process's timing of the paired quantity; its rounds 1 where its interval was a bootstrap over pairs
    (no between-round s.d.: harness.measure.speedup.speedup_interval)."""
    speedup, low, high = timing.get(value), timing.get(f"{prefix}speedup_low"), timing.get(f"{prefix}speedup_high")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (speedup, low, high)):
        return None
    rounds = timing.get("rounds") if timing.get("speedup_round_sd") is not None else 1
    return ProcessTiming(speedup, low, high, rounds)


def rewrite_rows(run_dir: Path, merged: dict[str, Row]) -> None:
    """rows.jsonl with the `merged` rows in place of those of their cell ids, the rest and the order as they were,
    written durably (harness.safe_files.write_plain with fsync); not rewritten, with a warning, when a line of it
    could not be read (it would be lost)."""
    if not merged:
        return
    path = run_dir / ROWS_FILE
    records = read_rows(run_dir)
    if len(records) != sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()):
        warnings.warn(f"attnsuite: {path} has a line it cannot read: the timing processes are not merged", stacklevel=2)
        return
    lines = [merged[r["cell_id"]].to_dict() if r["cell_id"] in merged else r for r in records]
    write_plain(path, "".join(json.dumps(r, allow_nan=False, default=str) + "\n" for r in lines), durable=True)
