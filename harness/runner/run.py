"""Run a sweep: every cell of the spec to an executor, each row appended as it arrives, nothing lost.

spec (defaults < --config TOML < flags) -> plan -> each cell to an executor (this process, a
subprocess, Ray, Slurm: harness.executors) -> each row appended to results/<run-id>/rows.jsonl as
it arrives (this driver is its only writer) -> at the end rows.csv, the report and a compact
table on stdout.
From Python: ``run_sweep(sweep_spec(cli={"seq_lens": "256,512"}), out="results")``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.spec import SweepSpec, build_spec, describe, spec_to_toml


def sweep_spec(
    *,
    toml_path: str | Path | None = None,
    toml: dict[str, Any] | None = None,
    cli: dict[str, Any] | None = None,
    plan_only: bool = False,
    trust_plugins: bool = False,
) -> SweepSpec:
    """build_spec with the executors' option keys, then checked by the executor it names (harness.executors.resolve_spec)."""
    from harness.executors import option_knobs, resolve_spec

    flags = {key: k.flag or key for key, (k, _) in option_knobs().items()}
    spec = build_spec(
        toml_path=toml_path, toml=toml, cli=cli, plan_only=plan_only, executor_flags=flags, trust_plugins=trust_plugins
    )
    return resolve_spec(spec, plan_only=plan_only)


def where_keys() -> set[str]:
    """The keys that say where cells run, not what they measure: the only ones a resumed run takes from the command line."""
    from harness.executors import option_knobs

    return {"executor", "plugins", *option_knobs()}


def check_resume(resume: str | Path, *, run_id: str | None = None, out: str | Path | None = None) -> Path:
    """The folder a resumed run continues; UsageError when it is not a run folder or a new name or place is given too."""
    from harness.store import check_run_id

    if run_id is not None:
        check_run_id(run_id)
        raise UsageError(f"--resume {resume} continues that folder under its own name; drop --run-id {run_id}")
    if out is not None:
        raise UsageError(f"--resume {resume} continues that folder where it is; drop --out {out}")
    run_dir = Path(resume)
    if not run_dir.is_dir():
        raise UsageError(f"--resume {resume}: no such run folder; pass a folder made by `python -m harness sweep`")
    return run_dir


def resume_spec(
    run_dir: Path, *, overrides: dict[str, Any], plan_only: bool = False, trust_plugins: bool = False
) -> SweepSpec:
    """The spec a resumed run replays: its spec.toml, keys it predates at what they meant then (RESUMED_SPEC_DEFAULTS),
    and from `overrides` only where cells run (WHERE_KEYS); another executor drops the stored executor settings."""
    from harness.spec import RESUMED_SPEC_DEFAULTS, load_toml

    if not (run_dir / "spec.toml").is_file():
        raise UsageError(
            f"--resume {run_dir}: not a run folder (no spec.toml); pass a folder made by `python -m harness sweep`"
        )
    stored = load_toml(run_dir / "spec.toml")
    older = {k: v for k, v in RESUMED_SPEC_DEFAULTS.items() if k not in stored}
    if overrides.get("executor") is None:
        return sweep_spec(
            toml_path=run_dir / "spec.toml", toml=older, cli=overrides, plan_only=plan_only, trust_plugins=trust_plugins
        )
    stored = {k: v for k, v in stored.items() if k not in where_keys() - {"plugins"}}
    return sweep_spec(toml={**stored, **older}, cli=overrides, plan_only=plan_only, trust_plugins=trust_plugins)


def plan_lines(spec: SweepSpec, resume: Path | None = None) -> list[str]:
    """The cells a sweep would run, one line each with its id ("done" when a resumed run has its row), and a total."""
    from harness.plan import plan
    from harness.store import completed_cell_ids, read_rows

    cells = plan(spec)
    done = completed_cell_ids(read_rows(resume)) if resume else set()
    lines = [describe(spec)]
    for cell in cells:
        mark = "done " if cell.cell_id in done else ""
        lines.append(f"{cell.cell_id}  {mark}{cell.label}")
    todo = sum(cell.cell_id not in done for cell in cells)
    lines.append(f"{len(cells)} cells planned" + (f", {todo} still to run" if resume else ""))
    return lines


def run_sweep(
    spec: SweepSpec,
    *,
    out: str | Path = "results",
    run_id: str | None = None,
    resume: str | Path | None = None,
    quiet: bool = True,
) -> Path:
    """Measure every cell of `spec` into a run folder and return its path.

    Args:
        spec: from sweep_spec (or harness.spec.build_spec); spec.executor says where cells run (harness.executors).
        out: parent folder of run folders; run_id: the folder's name (default: time and device).
        resume: an existing run folder to continue (its cells with a row are not run again).
        quiet: no progress bar (it is also silent when stderr is not a terminal).
    """
    from harness.executors import resolve_spec
    from harness.store import create_run_dir, lock_run_dir, new_run_id

    spec = resolve_spec(spec)
    if resume is not None:
        run_dir = check_resume(resume, run_id=run_id)
    else:
        run_dir = create_run_dir(out, new_run_id(spec.device) if run_id is None else run_id, exact=run_id is not None)
    with lock_run_dir(run_dir):  # one writer per folder, from counting what is done to the last table
        _sweep_into(run_dir, spec, fresh=resume is None, quiet=quiet)
    return run_dir


def _sweep_into(run_dir: Path, spec: SweepSpec, *, fresh: bool, quiet: bool) -> None:
    """The body of run_sweep, under the folder's lock: env and spec, the rows a resumed run lacks, the tables."""
    import dataclasses

    import torch

    from harness.env import collect_env
    from harness.executors import CellJob, executor_class, make_executor, run_cells
    from harness.measure import CALIBRATION_SEED_OFFSET, MeasureSettings, RunInfo, outcome_row
    from harness.entries import knob_field
    from harness.measure.tuning import scoring_seeds, unreachable_carries_over
    from harness.plan import plan
    from harness.runner.longest import budget_bytes, search_memory_budget
    from harness.runner.progress import Progress
    from harness.schema import NOT_RUN_PREFIX
    from harness.store import (
        ENV_FILE,
        ROWS_FILE,
        SPEC_FILE,
        RowWriter,
        completed_cell_ids,
        read_rows,
        repair_tail,
        write_json,
    )

    if spec.device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(spec.device))
    settings = MeasureSettings.from_spec(spec)
    env = collect_env(spec.device)
    env["seeds"] = {
        "evaluation": spec.seed,
        "calibration": [spec.seed + CALIBRATION_SEED_OFFSET + i for i in range(spec.calibration_batches)],
        "tuning": scoring_seeds(spec.seed, spec.calibration_batches) if spec.error_budgets else [],
    }
    env["measure_settings"] = settings.to_dict()
    env["executor"] = spec.executor  # of the first part; each row's host and device_name say where it ran
    budget = budget_bytes(spec)
    if budget is not None:
        env["memory_budget_bytes"] = budget  # what the report's "Longest trainable N" is for ('device' resolved)
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
        (run_dir / SPEC_FILE).write_text(spec_to_toml(spec), encoding="utf-8")
    info = RunInfo(
        run_id=run_dir.name,
        device_name=(env["gpu"] or "cuda") if spec.device.startswith("cuda") else env["cpu"],
        host=env["host"],
        threads=torch.get_num_threads(),
        accuracy_reference=settings.accuracy_reference,
    )
    remote = executor_class(spec.executor).remote
    job = CellJob(
        settings=settings.to_dict(),
        run=dataclasses.asdict(info),
        run_dir=str(run_dir.resolve()),
        remote=remote,
        plugins=tuple(str(Path(p).resolve()) if Path(p).is_file() else p for p in spec.plugins),
        threads=spec.executor_options.get("cpus_per_cell") if remote and spec.device_type == "cpu" else None,
    )
    repair_tail(run_dir / ROWS_FILE)  # before counting: a complete last row without its newline is kept, not cut later
    existing = read_rows(run_dir)
    done = completed_cell_ids(existing)
    rows = {row["cell_id"]: row for row in existing}  # what the memory budget search walks
    cells = plan(spec)
    blocked = _blocked_series(existing, cells)
    progress = Progress(cells, done, enabled=not quiet)

    def skip(cell) -> dict | None:
        stop = blocked.get((cell.series_key, "stop"))
        if stop is not None and cell.seq_len > stop[1]:
            status, at = stop
            return outcome_row(
                cell, info, status, f"{NOT_RUN_PREFIX}: {status} at N={at} for the same variant, config and setting"
            )
        missed = blocked.get((cell.series_key, "unreachable"))
        if missed is not None and cell.seq_len > missed[1]:
            same_range = unreachable_carries_over(cell, missed[1])
            if not same_range:
                return None
            row = outcome_row(cell, info, "unreachable", f"{NOT_RUN_PREFIX}: {same_range}")
            row["config"] = {**row["config"], knob_field(cell.variant): None}  # no value was chosen (nor tried)
            return row
        return None

    try:
        with (
            make_executor(spec, job) as executor,
            RowWriter(run_dir) as writer,
        ):  # an engine that fails to start leaves no rows.jsonl

            def on_row(cell, row: dict[str, Any], measured: bool) -> None:
                writer.append(row)
                done.add(cell.cell_id)
                rows[cell.cell_id] = row
                if measured and row["status"] in BLOCKING:
                    _block(blocked, cell, row["status"])
                progress.finish(cell, row, measured=measured)

            todo = (cell for cell in cells if cell.cell_id not in done)
            run_cells(executor, todo, skip=skip, on_row=on_row, on_start=progress.start)
            if budget is not None:  # then the longest N per train series within it (harness.runner.longest)

                def measure(found: list) -> None:
                    progress.total += len(found)
                    run_cells(executor, found, skip=skip, on_row=on_row, on_start=progress.start)

                search_memory_budget(spec, budget, rows, measure)
    except KeyboardInterrupt:
        progress.close()
        plugins = "".join(f" --plugin {p}" for p in job.plugins)  # a spec file's plugins are imported only when named
        print(
            f"interrupted; the rows so far are in {run_dir}; continue with "
            f"python -m harness sweep --resume {run_dir}{plugins}",
            file=sys.stderr,
        )
        raise
    progress.close()
    finish_run(run_dir, plugins=job.plugins)


# Statuses at N that spare a series its longer N: out of memory, the time limit, and an error budget no value of the
# knob met (skipped only where the knob's range is the one searched: harness.measure.tuning.unreachable_carries_over).
BLOCKING = ("oom", "timeout", "unreachable")


def _blocked_series(rows: list[dict], cells: list) -> dict[tuple[str, str], tuple[str, int]]:
    """Series (a cell minus its length) that hit OOM, the time limit or an unreachable budget in earlier rows, and at which N."""
    from harness.schema import NOT_RUN_PREFIX

    by_id = {cell.cell_id: cell for cell in cells}
    blocked: dict[tuple[str, str], tuple[str, int]] = {}
    for row in rows:
        cell = by_id.get(row.get("cell_id"))
        if cell is None or row.get("status") not in BLOCKING or str(row.get("reason", "")).startswith(NOT_RUN_PREFIX):
            continue
        _block(blocked, cell, row["status"])
    return blocked


def _block(blocked: dict[tuple[str, str], tuple[str, int]], cell, status: str) -> None:
    """Record where the cell's series stopped, under (series, "stop") for oom and timeout at the shortest N (nothing
    longer runs) and under (series, "unreachable") at the longest searched N (its knob range is what a longer N is
    compared with): one does not hide the other."""
    kind = "unreachable" if status == "unreachable" else "stop"
    current = blocked.get((cell.series_key, kind))
    if current is None or (cell.seq_len > current[1] if kind == "unreachable" else cell.seq_len < current[1]):
        blocked[(cell.series_key, kind)] = (status, cell.seq_len)


def finish_run(run_dir: Path, *, plugins: tuple[str, ...] = ()) -> None:
    """rows.csv/Parquet, the report (a failure there is a warning); on stdout the table, the report's path, its answer
    at the largest N (harness.report.summary) and the folder. rows.jsonl is read once, here.

    `plugins`: the run's plugin targets, which the report's maps child imports too.
    """
    import warnings

    from harness.report.analysed import analyse
    from harness.report.summary import answer_lines, summary_table
    from harness.store import load_run, write_tables

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the reader skipped is in the run's notes, which the report lists
        run = load_run(run_dir)
    write_tables(run)
    analysed = analyse(run)
    reported = False
    try:
        from harness.report import write_report  # inside the try: a broken plotting install is this same warning

        write_report(analysed, plugins=plugins)
        reported = True
    except Exception as exc:  # the rows are safe on disk; a report failure is a warning, never silent
        print(
            f"warning: the report failed ({type(exc).__name__}: {exc}); "
            f"the rows are in {run_dir}; retry with python -m harness report {run_dir}",
            file=sys.stderr,
        )
    print(summary_table(analysed))
    if reported and (run_dir / "report.html").is_file():
        print(f"report: {run_dir / 'report.html'}")
    try:
        for line in answer_lines(analysed):
            print(line)
    except Exception as exc:  # like the report's: the rows are safe, the answer is in the report or a retry away
        print(
            f"warning: the answer failed ({type(exc).__name__}: {exc}); see python -m harness report {run_dir}",
            file=sys.stderr,
        )
    print(f"run folder: {run_dir}")
