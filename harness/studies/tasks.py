"""The tasks study (`python -m harness tasks`): tiny transformers trained from scratch per variant on MQAR and ListOps.

Each (task, N, variant) is one row (task_training.train_and_test); this module runs them all, adds
each row's delta to dense and writes tasks.csv/.json/.md/.png. A variant that cannot run a problem
is an `unsupported` row with its reason. The model is in task_model, the data in task_data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.report.render import Block, Paragraph
from harness.report.study_results import TASKS, tasks_note, tasks_table
from harness.studies.plots import plot_tasks
from harness.studies.results_io import write_results
from harness.studies.task_training import TaskPreset, make_problem, train_and_test

STEM = TASKS  # tasks.csv/.json/.md/.png


def run_tasks(
    tasks: list[str],
    variants: list[str],
    preset: TaskPreset,
    *,
    seed: int = 0,
    device: str = "cpu",
    overrides: dict[str, dict[str, Any]] | None = None,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every (task, N, variant): train and test; then each row's delta_to_dense (accuracy - dense's)."""
    rows = []
    for task in tasks:
        for N in preset.seq_lens:
            problem = make_problem(task, N, preset)
            for variant in variants:
                row = train_and_test(
                    problem, variant, preset, seed=seed, device=device, overrides=(overrides or {}).get(variant)
                )
                rows.append(row)
                if log:
                    shown = (
                        f"{row['accuracy']:.3f}" if row["accuracy"] is not None else f"{row['status']}: {row['reason']}"
                    )
                    log(f"{task:8s} N={N:<5d} {variant:15s} {shown}  ({row['train_s'] or 0:.1f}s)")
    dense = {
        (r["task"], r["seq_len"]): r["accuracy"] for r in rows if r["variant"] == "dense" and r["accuracy"] is not None
    }
    for r in rows:
        base = dense.get((r["task"], r["seq_len"]))
        if r["accuracy"] is not None and base is not None:
            r["delta_to_dense"] = r["accuracy"] - base
    return rows


def summary(rows: list[dict[str, Any]]) -> list[Block]:
    """tasks.md: accuracy (delta to dense) per task, variant and N (the table the report shows too), chance and majority."""
    return [tasks_table(rows), Paragraph(tasks_note(rows))]


def write_tasks(folder: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """tasks.csv, .json, .md and .png in `folder`; returns the paths."""
    return write_results(folder, STEM, rows, meta, summary=summary(rows), plot=plot_tasks)
