"""`python -m harness sweep`: every variant across sequence lengths, each cell a row, nothing lost.

spec (defaults < --config TOML < flags) -> plan -> each cell to an executor (this process, a
subprocess, Ray, Slurm: harness.executors) -> each row appended to results/<run-id>/rows.jsonl as
it arrives (the driver is its only writer) -> at the end rows.csv, the report and a compact
table on stdout.
From Python: ``run_sweep(build_spec(cli={"seq_lens": "256,512"}), out="results")``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.spec import FLAG_DESTS as _SPEC_FLAGS
from harness.spec import SweepSpec, build_spec, describe, spec_to_toml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to measure (override --config, which overrides the embedded default)")
    what.add_argument("--config", metavar="TOML", help="a sweep spec file (see docs/sweep.md)")
    what.add_argument("--variants", action="append", metavar="LIST",
                      help="names or globs with config overrides: 'dense,sliding_window:window=512,backend=banded' (default: all registered)")
    what.add_argument("--seq-lens", metavar="LIST", help="sequence lengths: '256,1k,4k' or a doubling range '256..8192'")
    what.add_argument("--batch", metavar="B", help="batch size")
    what.add_argument("--heads", metavar="H", help="number of heads")
    what.add_argument("--head-dim", metavar="LIST", help="head dims, e.g. '64,128'")
    what.add_argument("--dtypes", metavar="LIST", help="float32, bfloat16 (bf16), float16 (fp16)")
    what.add_argument("--causal", metavar="LIST", help="false, true or both")
    what.add_argument("--modes", metavar="LIST", help="forward (no grad), train (forward + backward)")
    what.add_argument("--inputs", metavar="LIST", help="input distributions, e.g. 'gaussian,local,gaussian:scale=4'")
    what.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    what.add_argument("--seed", help="evaluation seed (calibration uses other seeds)")
    what.add_argument("--plugin", action="append", metavar="MODULE_OR_FILE", help="import a user's variants first (repeatable)")
    how = parser.add_argument_group("how to measure")
    how.add_argument("--time-budget", metavar="SECONDS", help="seconds of timing per cell")
    how.add_argument("--repeats", metavar="N", help="at least N timed calls per cell")
    how.add_argument("--timeout", metavar="SECONDS", help="per-cell limit; a cell past it becomes a 'timeout' row (0: none)")
    how.add_argument("--error-rows", metavar="R", help="query rows sampled for the float64 accuracy check")
    how.add_argument("--calibration-steps", metavar="STEPS", help="optimizer steps for learnable variants")
    run_on = parser.add_argument_group("where cells run (docs/scaling.md); also allowed with --resume")
    run_on.add_argument("--executor", metavar="NAME", help="local (default), subprocess, ray or slurm")
    run_on.add_argument("--isolate", action="store_true", help="= --executor subprocess: a segfault or OOM kill becomes a row")
    run_on.add_argument("--ray-address", metavar="ADDRESS", help="ray: join this cluster ('auto', 'ray://head:10001'); default: start a local one")
    run_on.add_argument("--cpus-per-cell", metavar="K", help="ray, slurm: CPUs per cell (default 1; a CPU cell's torch threads)")
    run_on.add_argument("--max-parallel", metavar="N", help="ray, slurm: most cells running at once (ray default: every GPU, or CPUs // K; slurm: the array limit, default 256)")
    run_on.add_argument("--slurm-partition", metavar="NAME", help="slurm: partition")
    run_on.add_argument("--slurm-time", metavar="MINUTES", help="slurm: time limit per task (default: from --timeout)")
    run_on.add_argument("--slurm-gpus-per-task", metavar="G", help="slurm: GPUs per task (default 1 on cuda, 0 on cpu)")
    run_on.add_argument("--slurm-extra", action="append", metavar="KEY=VALUE,...", help="slurm: more sbatch options, e.g. account=proj,qos=high")
    run_on.add_argument("--slurm-cluster", metavar="KIND", help="slurm (default) or local: submitit's local processes, to try a setup here")
    where = parser.add_argument_group("where results go")
    where.add_argument("--out", default="results", metavar="DIR", help="folder for run folders (default: results)")
    where.add_argument("--run-id", metavar="NAME", help="run folder name (default: <date>-<time>-<device>)")
    where.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run: its spec, only the cells it lacks")
    where.add_argument("--dry-run", action="store_true", help="print the planned cells and exit")
    where.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from harness.cli import UsageError
    from harness.spec import EXECUTOR_KEYS, load_toml

    cli = {key: _flag_value(getattr(args, dest)) for dest, key in _SPEC_FLAGS.items()}
    if args.isolate:
        if cli["executor"] not in (None, "subprocess"):
            raise UsageError(f"--isolate is --executor subprocess; it cannot go with --executor {cli['executor']}")
        cli["executor"] = "subprocess"
    if args.resume:
        given = [f"--{dest.replace('_', '-')}" for dest, key in _SPEC_FLAGS.items()
                 if cli[key] is not None and dest != "plugin" and key not in EXECUTOR_KEYS]
        if given or args.config:
            raise UsageError(f"--resume replays the run's own spec.toml; drop {', '.join(given + (['--config'] if args.config else []))}")
        run_dir = Path(args.resume)
        if not (run_dir / "spec.toml").is_file():
            raise UsageError(f"--resume {run_dir}: not a run folder (no spec.toml); pass a folder made by `python -m harness sweep`")
        overrides = {k: v for k, v in cli.items() if v is not None and (k in EXECUTOR_KEYS or k == "plugins")}
        if cli["executor"] is None:
            spec = build_spec(toml_path=run_dir / "spec.toml", cli=overrides, plan_only=args.dry_run)
        else:  # another executor: the stored executor settings do not carry over
            stored = {k: v for k, v in load_toml(run_dir / "spec.toml").items() if k not in EXECUTOR_KEYS}
            spec = build_spec(toml=stored, cli=overrides, plan_only=args.dry_run)
    else:
        spec = build_spec(toml_path=args.config, cli=cli, plan_only=args.dry_run)
    if args.dry_run:
        print_plan(spec, Path(args.resume) if args.resume else None)
        return 0
    run_sweep(spec, out=args.out, run_id=args.run_id, resume=args.resume, quiet=args.quiet)
    return 0


def _flag_value(value: Any) -> Any:
    if isinstance(value, list):  # repeatable flags
        return [v for v in value if v] or None
    return value


def print_plan(spec: SweepSpec, resume: Path | None = None) -> None:
    """The cells a sweep would run, one per line, with their ids."""
    from harness.plan import plan
    from harness.store import completed_cell_ids, read_rows

    cells = plan(spec)
    done = completed_cell_ids(read_rows(resume)) if resume else set()
    print(describe(spec))
    for cell in cells:
        mark = "done " if cell.cell_id in done else ""
        print(f"{cell.cell_id}  {mark}{cell.label}")
    todo = sum(cell.cell_id not in done for cell in cells)
    print(f"{len(cells)} cells planned" + (f", {todo} still to run" if resume else ""))


def run_sweep(
    spec: SweepSpec,
    *,
    out: str | Path = "results",
    run_id: str | None = None,
    resume: str | Path | None = None,
    isolate: bool = False,
    quiet: bool = True,
) -> Path:
    """Measure every cell of `spec` into a run folder and return its path.

    Args:
        spec: from harness.spec.build_spec; spec.executor says where cells run (harness.executors).
        out: parent folder of run folders; run_id: the folder's name (default: time and device).
        resume: an existing run folder to continue (its cells with a row are not run again).
        isolate: measure each cell in a subprocess (= spec.executor "subprocess").
        quiet: no progress bar (it is also silent when stderr is not a terminal).
    """
    import dataclasses

    import torch

    from harness.env import collect_env
    from harness.executors import REMOTE, CellJob, make_executor, run_cells
    from harness.measure import CALIBRATION_SEED_OFFSET, MeasureSettings, RunInfo, outcome_row
    from harness.plan import plan
    from harness.progress import Progress
    from harness.store import (ENV_FILE, SPEC_FILE, RowWriter, completed_cell_ids, create_run_dir, new_run_id,
                               read_rows, write_json)

    if isolate and spec.executor == "local":
        spec = dataclasses.replace(spec, executor="subprocess")
    if resume is not None:
        run_dir = Path(resume)
    else:
        run_dir = create_run_dir(out, run_id or new_run_id(spec.device), exact=run_id is not None)
    if spec.device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(spec.device))
    settings = MeasureSettings.from_spec(spec)
    env = collect_env(spec.device)
    env["seeds"] = {
        "evaluation": spec.seed,
        "calibration": [spec.seed + CALIBRATION_SEED_OFFSET + i for i in range(spec.calibration_batches)],
    }
    env["measure_settings"] = settings.to_dict()
    env["executor"] = spec.executor  # of the first part; each row's host and device_name say where it ran
    if not (run_dir / ENV_FILE).exists():
        write_json(run_dir / ENV_FILE, env)
    if not (run_dir / SPEC_FILE).exists():
        (run_dir / SPEC_FILE).write_text(spec_to_toml(spec), encoding="utf-8")
    info = RunInfo(
        run_id=run_dir.name,
        device_name=(env["gpu"] or "cuda") if spec.device.startswith("cuda") else env["cpu"],
        host=env["host"],
        threads=torch.get_num_threads(),
    )
    remote = spec.executor in REMOTE
    job = CellJob(
        settings=settings.to_dict(), run=dataclasses.asdict(info), run_dir=str(run_dir.resolve()), remote=remote,
        plugins=tuple(str(Path(p).resolve()) if Path(p).is_file() else p for p in spec.plugins),
        threads=spec.cpus_per_cell if remote and spec.device_type == "cpu" else None,
    )
    existing = read_rows(run_dir)
    done = completed_cell_ids(existing)
    cells = plan(spec)
    blocked = _blocked_series(existing, cells)
    progress = Progress(len(cells), enabled=not quiet)
    progress.done = sum(cell.cell_id in done for cell in cells)

    def skip(cell) -> dict | None:
        block = blocked.get(cell.series_key)
        if block is None or cell.seq_len <= block[1]:
            return None
        status, at = block
        return outcome_row(cell, info, status, f"not run: {status} at N={at} for the same variant, config and setting")

    try:
        with make_executor(spec, job) as executor, RowWriter(run_dir) as writer:  # an engine that fails to start leaves no rows.jsonl
            def on_row(cell, row: dict, measured: bool) -> None:
                writer.append(row)
                done.add(cell.cell_id)
                if measured and row["status"] in ("oom", "timeout"):
                    current = blocked.get(cell.series_key)
                    if current is None or cell.seq_len < current[1]:
                        blocked[cell.series_key] = (row["status"], cell.seq_len)
                progress.finish(row["status"], measured=measured)

            todo = (cell for cell in cells if cell.cell_id not in done)
            run_cells(executor, todo, skip=skip, on_row=on_row, on_start=lambda cell: progress.start(cell.label))
    except KeyboardInterrupt:
        progress.close()
        print(f"interrupted; the rows so far are in {run_dir}; continue with --resume {run_dir}", file=sys.stderr)
        raise
    progress.close()
    finish_run(run_dir)
    return run_dir


def _blocked_series(rows: list[dict], cells: list) -> dict[str, tuple[str, int]]:
    """Series (a cell minus its length) that hit OOM or the time limit in earlier rows, and at which N."""
    by_id = {cell.cell_id: cell for cell in cells}
    blocked: dict[str, tuple[str, int]] = {}
    for row in rows:
        cell = by_id.get(row.get("cell_id"))
        if cell is None or row.get("status") not in ("oom", "timeout") or str(row.get("reason", "")).startswith("not run"):
            continue
        current = blocked.get(cell.series_key)
        if current is None or cell.seq_len < current[1]:
            blocked[cell.series_key] = (row["status"], cell.seq_len)
    return blocked


def finish_run(run_dir: Path) -> None:
    """rows.csv/Parquet, the report (a failure there is a warning), the table and the folder on stdout."""
    from harness.store import read_rows, write_tables

    write_tables(run_dir)
    try:
        from harness.report import write_report  # inside the try: a broken plotting install is this same warning

        write_report(run_dir)
    except Exception as exc:  # the rows are safe on disk; a report failure is a warning, never silent
        print(f"warning: the report failed ({type(exc).__name__}: {exc}); "
              f"the rows are in {run_dir}; retry with python -m harness report {run_dir}", file=sys.stderr)
    print(summary_table(read_rows(run_dir)))
    print(f"run folder: {run_dir}")


# ---- the table on stdout ---------------------------------------------------------------------------------
def summary_table(rows: list[dict]) -> str:
    """Variant x N per setting: latency, speed-up and memory ratio vs dense, relative error (status when not ok)."""
    if not rows:
        return "(no rows)"
    import warnings

    from harness.analysis import with_dense_ratios
    from harness.rows import rows_frame

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = rows_frame(rows)
    frame = with_dense_ratios(frame)
    keys = ["device", "dtype", "mode", "causal", "batch", "heads", "head_dim", "inputs"]
    blocks = []
    for setting, group in frame.groupby(keys, sort=False):
        s = dict(zip(keys, setting))
        title = (f"{s['mode']} {s['dtype']} {'causal' if s['causal'] else 'non-causal'} B={s['batch']} H={s['heads']} "
                 f"D={s['head_dim']} inputs={s['inputs']} on {s['device']}")
        lengths = sorted(group["seq_len"].unique())
        header = ["variant", "metric"] + [_n(n) for n in lengths]
        lines = [header]
        for series, part in group.groupby("series", sort=False):
            by_n = {int(r["seq_len"]): r for _, r in part.iterrows()}
            for i, (metric, fmt) in enumerate(_METRICS):
                cells = []
                for n in lengths:
                    r = by_n.get(int(n))
                    if r is None:
                        cells.append("")
                    elif r["status"] != "ok":
                        cells.append(str(r["status"]) if i == 0 else "")
                    else:
                        cells.append(fmt(r))
                lines.append([series if i == 0 else "", metric] + cells)
        widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
        text = "\n".join("  ".join(cell.ljust(w) if c < 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(line, widths))).rstrip() for line in lines)
        blocks.append(f"{title}\n{text}")
    return "\n\n".join(blocks)


def _n(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f}us"
    if value < 1:
        return f"{value * 1e3:.3g}ms"
    return f"{value:.3g}s"


def _ratio(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


def _error(value: float) -> str:
    return "-" if value != value else f"{value:.1e}"


_METRICS = (
    ("latency", lambda r: _seconds(r["latency_s"])),
    ("speed-up", lambda r: _ratio(r["speedup"])),
    ("memory", lambda r: _ratio(r["memory_ratio"])),
    ("rel err", lambda r: _error(r["rel_l2_error"])),
)
