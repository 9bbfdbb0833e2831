"""The body of a sweep under its folder's lock: env and spec written, the cells the folder lacks run, the finish.

harness.runner.run.run_sweep makes or checks the folder and takes its lock; this is what happens inside: the machine's
limits and the environment recorded, the planned cells minus those with a row handed to the executor (series that
stopped at a shorter N are not run again: harness.runner.blocked), then the memory budget search
(harness.runner.longest), rows.csv and the report.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import torch

from harness import executors
from harness.entries import knob_field
from harness.env import collect_env
from harness.errors import RunFailed, Terminated
from harness.executors import CellJob, executor_class, make_executor
from harness.executors.isolated import clean_cell_temp
from harness.heap import keep_freed_memory
from harness.measure import CALIBRATION_SEED_OFFSET, MeasureSettings, RunInfo, outcome_row
from harness.measure.accuracy import scoring_seeds
from harness.measure.limits import limit_dtypes, run_limits
from harness.plan import plan
from harness.row import Row
from harness.runner.blocked import BLOCKING, block, blocked_series, unreachable_carries_over
from harness.runner.finish import finish_run, resume_command
from harness.runner.longest import budget_bytes, search_memory_budget
from harness.runner.processes import time_in_processes
from harness.runner.progress import Progress
from harness.schema import NOT_RUN_PREFIX
from harness.spec import SweepSpec, spec_to_toml
from harness.store import (
    ENV_FILE,
    ROWS_FILE,
    SPEC_FILE,
    RowWriter,
    completed_cell_ids,
    load_rows,
    repair_tail,
    write_json,
    write_plain,
)


def sweep_into(run_dir: Path, spec: SweepSpec, *, fresh: bool, quiet: bool, remeasure_limits: bool = False) -> None:
    """The body of run_sweep, under the folder's lock: env and spec, the rows a resumed run lacks, the tables."""
    if spec.device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(spec.device))
    settings = MeasureSettings.from_spec(spec)
    budget = budget_bytes(spec)
    env = _run_env(spec, settings, budget, remeasure_limits)
    _write_env_and_spec(run_dir, spec, env, fresh)
    info = _run_info(run_dir, spec, settings, env)
    job = _cell_job(run_dir, spec, settings, info)
    cells = _Cells.of(run_dir, spec, info, quiet)
    try:
        _run_cells(run_dir, spec, job, cells, budget)
        cells.progress.close()
        time_in_processes(run_dir, spec, job, cells.rows, quiet=quiet)  # --processes: the later timing processes
    except KeyboardInterrupt as exc:
        cells.progress.close()
        _say_how_to_continue(exc, run_dir, job)
        raise
    finish_run(run_dir, plugins=job.plugins)
    missing = [cell for cell in cells.planned if cell.cell_id not in cells.done]
    if missing:  # the exit status says whether every planned cell has a row
        raise RunFailed(
            f"{len(missing)} of {len(cells.planned)} planned cells have no row (first: {missing[0].label}); "
            f"continue with {resume_command(run_dir, job.plugins)}"
        )


def _run_env(spec: SweepSpec, settings: MeasureSettings, budget: int | None, remeasure_limits: bool) -> dict[str, Any]:
    """env.json's content: the environment, the seeds, the settings, the executor and the machine's limits."""
    env = collect_env(spec.device)
    env["heap"] = keep_freed_memory()  # before the first cell: freed memory stays in this process (harness.heap)
    env["seeds"] = {
        "evaluation": spec.seed,
        "calibration": [spec.seed + CALIBRATION_SEED_OFFSET + i for i in range(spec.calibration_batches)],
        "tuning": scoring_seeds(spec.seed, spec.calibration_batches) if spec.error_budgets else [],
    }
    env["measure_settings"] = settings.to_dict()
    env["executor"] = spec.executor  # of the first part; each row's host and device_name say where it ran
    env["limits"] = run_limits(spec.device, limit_dtypes(spec), remeasure=remeasure_limits)  # every row is held to them
    if budget is not None:
        env["memory_budget_bytes"] = budget  # what the report's "Longest trainable N" is for ('device' resolved)
    return env


def _write_env_and_spec(run_dir: Path, spec: SweepSpec, env: dict[str, Any], fresh: bool) -> None:
    """env.json and spec.toml: written by a fresh sweep, kept by a resumed one that has them."""
    if (
        fresh and (run_dir / SPEC_FILE).exists()
    ):  # a chosen --run-id whose folder holds no rows (create_run_dir checked)
        print(
            f"note: {run_dir} held a {SPEC_FILE} but no rows; replacing it (and {ENV_FILE}) with this sweep's",
            file=sys.stderr,
        )
    if fresh or not (run_dir / ENV_FILE).exists():
        write_json(run_dir / ENV_FILE, env)
    if fresh or not (run_dir / SPEC_FILE).exists():
        write_plain(run_dir / SPEC_FILE, spec_to_toml(spec))


def _run_info(run_dir: Path, spec: SweepSpec, settings: MeasureSettings, env: dict[str, Any]) -> RunInfo:
    """The run fields every row carries."""
    return RunInfo(
        run_id=run_dir.name,
        device_name=(env["gpu"] or "cuda") if spec.device.startswith("cuda") else env["cpu"],
        host=env["host"],
        threads=torch.get_num_threads(),
        accuracy_reference=settings.accuracy_reference,
        limits=env["limits"],
    )


def _cell_job(run_dir: Path, spec: SweepSpec, settings: MeasureSettings, info: RunInfo) -> CellJob:
    """What every cell of the run needs wherever it runs: settings, run fields, the folder, the plugins."""
    remote = executor_class(spec.executor).remote
    return CellJob(
        settings=settings.to_dict(),
        run=dataclasses.asdict(info),
        run_dir=str(run_dir.resolve()),
        remote=remote,
        plugins=tuple(str(Path(p).resolve()) if Path(p).is_file() else p for p in spec.plugins),
        threads=spec.executor_options.get("cpus_per_cell") if remote and spec.device_type == "cpu" else None,
    )


@dataclasses.dataclass
class _Cells:
    """The planned cells and what the folder knows of them: ids with a row, rows by id, series that stopped."""

    planned: list  # the plan's cells, in order
    done: set[str]  # ids of the cells with a row
    rows: dict[str, Row]  # rows by cell id: what the memory budget search walks
    blocked: dict  # harness.runner.blocked: where a series stopped
    info: RunInfo
    progress: Progress

    @classmethod
    def of(cls, run_dir: Path, spec: SweepSpec, info: RunInfo, quiet: bool) -> _Cells:
        """The folder's rows read once, against the spec's plan."""
        clean_cell_temp(run_dir)  # what isolated cells of a killed sweep left (we hold the lock: none is running)
        repair_tail(
            run_dir / ROWS_FILE
        )  # before counting: a complete last row without its newline is kept, not cut later
        existing = load_rows(run_dir)
        done = completed_cell_ids(existing)
        rows = {row.cell_id: row for row in existing}
        cells = plan(spec)
        blocked = blocked_series(existing, cells)
        return cls(cells, done, rows, blocked, info, Progress(cells, done, enabled=not quiet))

    def todo(self):
        """The planned cells without a row, pulled lazily."""
        return (cell for cell in self.planned if cell.cell_id not in self.done)

    def skip(self, cell) -> dict | None:
        """A "not run" row for a cell whose series stopped at a shorter N (or whose search cannot succeed), else None."""
        stop = self.blocked.get((cell.series_key, "stop"))
        if stop is not None and cell.seq_len > stop[1]:
            status, at = stop
            return outcome_row(
                cell,
                self.info,
                status,
                f"{NOT_RUN_PREFIX}: {status} at N={at} for the same variant, config and setting",
            )
        missed = self.blocked.get((cell.series_key, "unreachable"))
        if missed is not None and cell.seq_len > missed[1]:
            same_range = unreachable_carries_over(cell, missed[1])
            if not same_range:
                return None
            row = Row.from_dict(outcome_row(cell, self.info, "unreachable", f"{NOT_RUN_PREFIX}: {same_range}"))
            return row.update(
                config={**row.config, knob_field(cell.variant): None}
            ).to_dict()  # no value chosen, nor tried
        return None

    def record(self, writer: RowWriter, cell, row: Row, measured: bool) -> None:
        """A row arrived: appended, counted done, kept for the search, and a failure blocks its series' longer N."""
        writer.append(row)
        self.done.add(cell.cell_id)
        self.rows[cell.cell_id] = row
        if measured and row.status in BLOCKING:
            block(self.blocked, cell, row.status)
        self.progress.finish(cell, row, measured=measured)


def _run_cells(run_dir: Path, spec: SweepSpec, job: CellJob, cells: _Cells, budget: int | None) -> None:
    """The cells without a row through the executor, then the memory budget search, each row appended as it arrives."""
    run_cells = executors.run_cells  # looked up per sweep (the module's attribute), so a test can wrap it
    with (
        make_executor(spec, job) as executor,
        RowWriter(run_dir) as writer,
    ):  # an engine that fails to start leaves no rows.jsonl

        def on_row(cell, row: dict[str, Any], measured: bool) -> None:
            cells.record(writer, cell, Row.from_dict(row), measured)  # the executor's JSON object, typed once

        run_cells(executor, cells.todo(), skip=cells.skip, on_row=on_row, on_start=cells.progress.start)
        if budget is not None:  # then the longest N per train series within it (harness.runner.longest)

            def measure(found: list) -> None:
                cells.progress.total += len(found)
                run_cells(executor, found, skip=cells.skip, on_row=on_row, on_start=cells.progress.start)

            search_memory_budget(spec, budget, cells.rows, measure)
    clean_cell_temp(run_dir)  # every child has exited with the executor: a finished run folder holds no .cells


def _say_how_to_continue(exc: KeyboardInterrupt, run_dir: Path, job: CellJob) -> None:
    """One line on stderr for Ctrl-C or SIGTERM: where the rows are and the command that continues."""
    # a spec file's plugins are imported, and a remote executor used, only when named (or the file trusted)
    named = " --trust-config" if job.remote else "".join(f" --plugin {p}" for p in job.plugins)
    print(
        f"{'terminated (SIGTERM)' if isinstance(exc, Terminated) else 'interrupted'}; the rows so far are in "
        f"{run_dir}; continue with "
        f"python -m harness sweep --resume {run_dir}{named}",
        file=sys.stderr,
    )
    exc.reported = True  # the command adds no second line
