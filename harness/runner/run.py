"""Run a sweep: every cell of the spec to an executor, each row appended as it arrives, nothing lost.

spec (defaults < --config TOML < flags) -> plan -> each cell to an executor (this process, a
subprocess, Ray, Slurm: harness.executors) -> each row appended to results/<run-id>/rows.jsonl as
it arrives (this driver is its only writer) -> at the end rows.csv, the report and a compact
table on stdout.
From Python: ``run_sweep(sweep_spec(cli={"seq_lens": "256,512"}), out="results")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import RunFailed, UsageError
from harness.executors import guarded_keys, option_knobs, resolve_spec
from harness.inputs.model import run_folder
from harness.plan import plan, plan_header, skipped_reasons
from harness.runner.estimate import wall_time_line
from harness.runner.finish import finish_run, resume_command  # noqa: F401 - finish_run re-exported (harness.runner)
from harness.runner.signals import sigterm_stops
from harness.runner.sweep_into import sweep_into
from harness.spec import RESUMED_SPEC_DEFAULTS, SweepSpec, build_spec, describe, load_toml
from harness.store import (
    check_run_folder,
    check_run_id,
    completed_cell_ids,
    create_run_dir,
    load_rows,
    lock_run_dir,
    new_run_id,
)
from harness.store.run_dir import WRITTEN_FILES, WRITTEN_FOLDERS


def sweep_spec(
    *,
    toml_path: str | Path | None = None,
    toml: dict[str, Any] | None = None,
    cli: dict[str, Any] | None = None,
    plan_only: bool = False,
    trust_config: bool = False,
    preset: str | None = None,
) -> SweepSpec:
    """build_spec (over the embedded `preset`, harness.spec.presets, when one is named) with the executors' option
    keys, then checked by the executor it names (harness.executors.resolve_spec).

    A spec file's plugins and the settings that run or connect to something (harness.executors.guarded_keys) are
    taken from it only with `trust_config` or when the command line gives them too."""
    flags = {key: k.flag or key for key, (k, _) in option_knobs().items()}
    spec = build_spec(
        toml_path=toml_path,
        toml=toml,
        cli=cli,
        plan_only=plan_only,
        executor_flags=flags,
        guarded=guarded_keys(),
        trust_config=trust_config,
        preset=preset,
    )
    spec = resolve_spec(spec, plan_only=plan_only)
    _check_plans_cells(spec)
    return spec


def _check_plans_cells(spec: SweepSpec) -> None:
    """UsageError when the spec's axes leave no cell to measure (each combination is skipped by the planner)."""
    if not plan(spec):
        raise UsageError(
            f"the spec plans 0 cells ({describe(spec)}): every combination of its settings is skipped ("
            + "; ".join(skipped_reasons(spec) or ["decode needs forward and causal"])
            + "); change the axes"
        )


def where_keys() -> set[str]:
    """The keys that say where cells run, not what they measure: the only ones a resumed run takes from the command line."""
    return {"executor", "plugins", *option_knobs()}


def check_resume(resume: str | Path, *, run_id: str | None = None, out: str | Path | None = None) -> Path:
    """The folder a resumed run continues; UsageError when it is not a run folder or a new name or place is given too."""
    if run_id is not None:
        check_run_id(run_id)
        raise UsageError(f"--resume {resume} continues that folder under its own name; drop --run-id {run_id}")
    if out is not None:
        raise UsageError(f"--resume {resume} continues that folder where it is; drop --out {out}")
    if not str(resume).strip():
        raise UsageError("--resume '': expected a run folder (results/<run-id>); pass the folder to continue")
    return check_run_folder(
        resume, WRITTEN_FILES, WRITTEN_FOLDERS
    )  # no link for a folder or file, no FIFO for rows.jsonl


def resume_spec(
    run_dir: Path, *, overrides: dict[str, Any], plan_only: bool = False, trust_config: bool = False
) -> SweepSpec:
    """The spec a resumed run replays: its spec.toml, keys it predates at what they meant then (RESUMED_SPEC_DEFAULTS),
    and from `overrides` only where cells run (WHERE_KEYS); another executor drops the stored executor settings."""
    if not (run_dir / "spec.toml").is_file():
        rows = run_dir / "rows.jsonl"
        if not rows.is_file() or rows.stat().st_size == 0:  # a sweep killed before it wrote its spec: nothing to keep
            raise UsageError(
                f"--resume {run_dir}: no spec.toml and no rows (a sweep stopped before it began); nothing to continue: "
                f"run the same sweep again with --out {run_dir.parent} --run-id {run_dir.name}"
            )
        raise UsageError(
            f"--resume {run_dir}: not a run folder (no spec.toml); pass a folder made by `python -m harness sweep`"
        )
    stored = load_toml(run_dir / "spec.toml")
    older = {k: v for k, v in RESUMED_SPEC_DEFAULTS.items() if k not in stored}
    if overrides.get("executor") is None:
        return sweep_spec(
            toml_path=run_dir / "spec.toml", toml=older, cli=overrides, plan_only=plan_only, trust_config=trust_config
        )
    stored = {k: v for k, v in stored.items() if k not in where_keys() - {"plugins"}}
    return sweep_spec(toml={**stored, **older}, cli=overrides, plan_only=plan_only, trust_config=trust_config)


def plan_lines(spec: SweepSpec, resume: Path | None = None) -> list[str]:
    """The cells a sweep would run, one line each with its id ("done" when a resumed run has its row), a total and
    what bounds the wall time of those still to run (harness.runner.estimate)."""
    cells = plan(spec)
    done = completed_cell_ids(load_rows(resume)) if resume else set()
    lines = [plan_header(spec)]
    for cell in cells:
        mark = "done " if cell.cell_id in done else ""
        lines.append(f"{cell.cell_id}  {mark}{cell.label}")
    todo = [cell for cell in cells if cell.cell_id not in done]
    lines.append(f"{len(cells)} cells planned" + (f", {len(todo)} still to run" if resume else ""))
    lines.append(wall_time_line(spec, todo))
    return lines


def run_sweep(
    spec: SweepSpec,
    *,
    out: str | Path = "results",
    run_id: str | None = None,
    resume: str | Path | None = None,
    quiet: bool = True,
    remeasure_limits: bool = False,
) -> Path:
    """Measure every cell of `spec` into a run folder and return its path.

    Args:
        spec: from sweep_spec (or harness.spec.build_spec); spec.executor says where cells run (harness.executors).
        out: parent folder of run folders; run_id: the folder's name (default: time and device).
        resume: an existing run folder to continue (its cells with a row are not run again).
        quiet: no progress bar (it is also silent when stderr is not a terminal).
        remeasure_limits: measure the machine's limits again rather than take them from the day's cache.
    """
    spec = resolve_spec(spec)
    if resume is not None:
        run_dir = check_resume(resume, run_id=run_id)
    else:
        run_dir = create_run_dir(out, new_run_id(spec.device) if run_id is None else run_id, exact=run_id is not None)
    # one writer per folder, from counting what is done to the last table; SIGTERM unwinds like Ctrl-C (the lock's pid
    # is removed, the executor closed); `model` inputs cache their captures in the folder
    try:
        with lock_run_dir(run_dir), sigterm_stops(), run_folder(run_dir):
            sweep_into(run_dir, spec, fresh=resume is None, quiet=quiet, remeasure_limits=remeasure_limits)
    except OSError as exc:  # a read-only folder, a full disk: the rows written so far are safe
        where = f"{exc.strerror or type(exc).__name__}: {exc.filename or run_dir}"
        raise RunFailed(
            f"cannot write the run folder ({where}); free space or make {run_dir} writable, then continue with "
            f"{resume_command(run_dir, spec.plugins)}"
        ) from None
    return run_dir
