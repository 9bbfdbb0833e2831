"""A run analysed once: its rows (read once) with the spec's budgets, metric and accuracy reference as fields, the
dense ratios, each row's error in the metric and the answer tables. The report, the terminal summary, the answer
lines and compare all take it; nothing is re-read or re-derived after `analyse`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.report import analysis, choice
from harness.report.clock import on_clock, run_clock
from harness.report.lengths import longest_trainable
from harness.spec import stored_spec_values
from harness.store import COL, Run, load_run
from harness.store.run_dir import CLOCK_REPORT_DIR

REFERENCES = {  # accuracy_reference -> what the errors are measured against, for captions
    "full": "exact float64 attention",
    "pattern": "exact float64 attention restricted to each variant's own pattern (accuracy_reference = pattern: "
    "whether a variant computes its pattern right, not how close it comes to full attention)",
}


@dataclass(frozen=True)
class AnalysedRun:
    """One run folder, analysed: what every rendering of it reads."""

    run: Run  # the folder as read: rows, env, spec text, what the reader skipped
    frame: (
        pd.DataFrame
    )  # the rows with dense ratios (analysis.with_dense_ratios), "error" and "in_budget" (analysis.with_budgets)
    budgets: tuple[float, ...]  # the error budgets the answer is for
    metric: str  # what a budget bounds: "rel_l2" | "cosine"
    # what the errors are against: "full" | "pattern" (every row records it; older rows: the spec's)
    accuracy_reference: str
    cell_timeout_s: float | None  # the run's per-cell limit (the report's maps get it too); None: none or unknown
    tables: tuple[choice.AnswerTable, ...]  # the answer: per setting and inputs, the winner per N and budget
    # -- the memory budget (SweepSpec.memory_budget) and its search's answer: harness.report.lengths --
    clock: str = "wall"  # what the speed-ups and the answer come from: "wall" | "cpu" (harness.report.clock)
    own_clock: str = "wall"  # the run's own clock (its spec's, else wall): report.md answers on it
    memory_budget: int | None = None  # bytes; None: the run searched none
    longest: pd.DataFrame | None = None  # longest.longest_trainable over every row (the searched lengths too)
    spec_budgets: tuple[float, ...] = ()  # the error budgets its spec.toml asked for (): none (DEFAULT_BUDGETS answer)
    # whether the spec or the caller named the budgets; False: `budgets` are DEFAULT_BUDGETS, which no answer line names
    budgets_asked: bool = True

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def report_folder(self) -> Path:
        """Where the report goes: the run folder on the run's own clock; on another (`report --clock cpu`), its
        RUN_DIR/report-<clock>/ folder, so the page of the run's own clock is never overwritten."""
        if self.clock == self.own_clock:
            return self.path
        return self.path / CLOCK_REPORT_DIR.format(clock=self.clock)

    @property
    def figures(self) -> dict[str, Path]:
        """The figures the report drew into the run folder, by name ("latency_vs_n": its PNG); {} before a report."""
        return {path.stem: path for path in sorted(self.path.glob("*.png"))}

    @property
    def ok(self) -> bool:
        """Whether any cell ran: without one there is no answer, figure or fit."""
        return bool(len(self.frame) and (self.frame[COL.status] == "ok").any())

    @property
    def errors_against(self) -> str:
        """What the run's errors are measured against, for captions and the answer."""
        return REFERENCES.get(self.accuracy_reference, REFERENCES["full"])


def analyse(run: Run | str | Path, *, budgets: Sequence[float] | None = None, clock: str | None = None) -> AnalysedRun:
    """Analyse a run folder (or an already loaded Run): its spec read through harness.spec, its rows once.

    `budgets`: answer for these error budgets (in the run's metric) instead of the run's own.
    `clock`: answer on this clock ("wall" | "cpu") instead of the run's own (harness.report.clock).
    Raises harness.errors.UsageError for a path that is not a run folder.
    """
    run = run if isinstance(run, Run) else load_run(run)
    spec, problem = stored_spec_values(run.spec_text)
    if problem:
        run.notes.append(problem)
    own, metric = analysis.run_budgets(spec)
    chosen = tuple(sorted(set(budgets))) if budgets else own
    clock = run_clock(spec, clock)
    frame = analysis.with_dense_ratios(on_clock(run.rows, clock))
    reference = _reference(frame, spec)
    frame = analysis.with_budgets(frame, chosen, metric)
    memory_budget, longest = _memory_budget(run.env, spec), None
    if memory_budget is not None:  # the search's lengths answer it alone: the rest of the report is at the requested N
        longest = longest_trainable(frame, memory_budget)
        requested = spec.get("seq_lens")
        if isinstance(requested, list) and all(isinstance(n, int) for n in requested):
            frame = frame[frame[COL.seq_len].isin(requested)].reset_index(drop=True)
    timeout = spec.get("cell_timeout_s")
    return AnalysedRun(
        run=run,
        frame=frame,
        budgets=chosen,
        metric=metric,
        accuracy_reference=reference,
        cell_timeout_s=float(timeout)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        else None,
        tables=tuple(choice.answer_tables(frame, chosen, metric, clock=clock)),
        clock=clock,
        own_clock=run_clock(spec),
        memory_budget=memory_budget,
        longest=longest,
        spec_budgets=own if spec.get("error_budgets") else (),
        budgets_asked=bool(budgets) or bool(spec.get("error_budgets")),
    )


def _memory_budget(env: dict[str, Any], spec: dict[str, Any]) -> int | None:
    """The run's memory budget in bytes: as the sweep resolved it (env.json), else the spec's size; None: none."""
    for value in (env.get("memory_budget_bytes"), spec.get("memory_budget")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _reference(frame: pd.DataFrame, spec: dict[str, Any]) -> str:
    """The run's accuracy reference: its rows' (rows from before the field: the spec's, else "full"), filled into the frame."""
    stated = spec.get("accuracy_reference") if spec.get("accuracy_reference") in REFERENCES else "full"
    if COL.accuracy_reference not in frame:
        frame[COL.accuracy_reference] = None
    frame[COL.accuracy_reference] = [stated if v is None else v for v in frame[COL.accuracy_reference]]
    found = sorted(set(frame[COL.accuracy_reference])) or [stated]
    return found[0] if len(found) == 1 else "pattern"  # a mix: the captions must not claim full attention for every row
