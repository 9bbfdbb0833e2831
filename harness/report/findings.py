"""The answer in words: the report's "Which one should I use" (a table N x budget per setting and inputs, what was not
measured, what was out of reach, the winner map, the conditions), its memory-budget section, and the lines a sweep
prints last. The decisions are harness.report.choice's and harness.report.reach's."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pandas as pd

from harness.error_metrics import METRIC_NAMES, budget_label
from harness.report import analysis, choice, reach
from harness.report.analysed import AnalysedRun, analyse
from harness.report.analysis import GENERALISATION_MARGIN
from harness.report.clock import clock_note
from harness.report.figures import figure_section
from harness.report.lengths import cheapest_lines, table_rows
from harness.report.render import Block, Heading, Paragraph, Table, format_bytes, format_lengths, format_n, format_text
from harness.store import COL


def recommendation(analysed: AnalysedRun, folder: Path) -> tuple[list[Path], list[Block]]:
    """'Which one should I use': an intro, a table N x budget per setting and input distribution (choice.py), the
    winner map (in `folder`) and the run's conditions."""
    frame, tables, metric = analysed.frame, list(analysed.tables), analysed.metric
    searched = (
        bool(pd.to_numeric(frame[COL.matched_budget], errors="coerce").notna().any())
        if COL.matched_budget in frame
        else False
    )
    blocks: list[Block] = [
        Heading(2, "Which one should I use"),
        Paragraph(
            _intro(tables, metric, searched=searched, asked=analysed.spec_budgets, against=analysed.errors_against)
        ),
    ]
    note = clock_note(analysed.clock)
    if note:
        blocks.append(Paragraph(f"On CPU time: {note}."))
    for table, title in zip(tables, choice.table_titles(tables)):
        headers = ["N"] + [budget_label(b, metric, ascii=False) for b in table.budgets]
        rows = [[format_n(n)] + [table.picks[(n, b)].text() for b in table.budgets] for n in table.lengths]
        if title:
            blocks.append(Paragraph(f"**{title}**"))
        if table.refusal:  # the winners would come from biased wall times: said instead of a table
            blocks.append(Paragraph(f"**No verdict**: {table.refusal}."))
        else:
            blocks.append(Table(headers, rows))
        blocks += _not_measured(frame, table, analysed.cell_timeout_s)
        blocks += reach.out_of_reach(frame, table)
    written, figures = figure_section(analysed, folder, "answer")
    if not figures and tables and all(t.refusal for t in tables) and analysed.clock == "wall":
        written, figures = _cpu_time_map(analysed, folder)
    blocks += figures
    blocks.append(Paragraph(conditions(analysed.run.env, frame)))
    return written, blocks


def _cpu_time_map(analysed: AnalysedRun, folder: Path) -> tuple[list[Path], list[Block]]:
    """The winner map on the timing thread's CPU time, for a run whose every wall-clock answer is refused (measured
    under load): a figure of what CPU time says, labelled as not a verdict; ([], []) when no row has CPU time."""
    on_cpu = analyse(dataclasses.replace(analysed.run, notes=[]), budgets=analysed.budgets, clock="cpu")
    written, figures = figure_section(on_cpu, folder, "answer")
    if not figures:
        return [], []
    return written, [
        Paragraph(
            "**Not a verdict**: the wall clock was contended, so this map is drawn from the timing thread's CPU time; "
            "`python -m harness report RUN_DIR --clock cpu` answers on it in full (RUN_DIR/report-cpu/)."
        )
    ] + figures


def _intro(
    tables: list[choice.AnswerTable], metric: str, *, searched: bool, asked: tuple[float, ...], against: str
) -> str:
    metric_name = METRIC_NAMES.get(metric, metric)
    margin = f"{GENERALISATION_MARGIN:.0%}"
    text = (
        f"Each cell names the fastest variant whose {metric_name} against {against} stays within the budget, with its paired speed-up "
        "over dense and its 95% interval (its latency where dense did not run); a variant beats dense only when the "
        "whole interval is above 1, and overlapping intervals of the top two are a tie."
    )
    if searched:
        text += (
            " Variants with a quality knob were searched per budget on held-out calibration seeds and scored on the "
            f"evaluation seed, where a searched config may exceed its budget by up to {margin} (such a cell shows its error)."
        )
    elif asked:
        text += (
            f" Its spec asks for error budgets ({', '.join(f'{b:g}' for b in asked)}) but no row was matched to one "
            "(no variant with a free quality knob ran): each variant counts at the config it ran."
        )
    else:
        text += (
            " This run searched no configs (no error_budgets in its spec): each variant counts at the config it ran."
        )
    if not tables:
        return text + " No setting has a row that ran."
    varying = choice.varying_keys(tables)
    shared = [k for k in list(analysis.SETTING_KEYS) + [COL.inputs] if k not in varying]
    if len(tables) > 1 and set(varying) <= {"inputs"}:
        text += f" Setting: {analysis.setting_title(tables[0].setting)}; one table per input distribution."
    elif len(tables) > 1:
        text += " All tables: " + ", ".join(choice.describe(tables[0], shared, skip_defaults=True)) + "."
    else:
        text += f" Setting: {analysis.setting_title(tables[0].setting)}, inputs {tables[0].inputs}."
    return text


def _not_measured(frame: pd.DataFrame, table: choice.AnswerTable, timeout_s: float | None) -> list[Block]:
    """One line under a table: the cells of its setting and inputs that timed out or were not run, per variant and N
    ('Not measured: dense timed out at N=8K (past the 60 s limit); chunked not run at N=8K ...')."""
    rows = analysis.select(frame, table.setting)
    rows = rows[rows[COL.inputs] == table.inputs]
    not_run = analysis.not_run_rows(rows)
    parts = []
    for label, mask in (("timed out", (rows[COL.status] == "timeout") & ~not_run), ("not run", not_run)):
        for variant, part in rows[mask].groupby(COL.variant, sort=True):
            parts.append(f"{variant} {label} at {format_lengths(sorted({int(n) for n in part[COL.seq_len]}))}")
    if not parts:
        return []
    timed_out = bool(((rows[COL.status] == "timeout") & ~not_run).any())
    limit = f" (past the {timeout_s:g} s limit per cell)" if timeout_s and timed_out else ""
    return [
        Paragraph(
            f"Not measured{limit}: " + "; ".join(parts) + ". A cell not run follows a shorter N of its series that ran "
            "out of time or memory, or missed its budget over the same search range; no answer above counts them."
        )
    ]


def conditions(env: dict[str, Any], frame: pd.DataFrame) -> str:
    """'Measured on <device>, float32; load per CPU 0.12 max, 0.05 median; torch 2 threads of 2 CPUs; torch 2.3.0.'"""
    device = ", ".join(sorted({str(v) for v in frame[COL.device_name] if v is not None})) if len(frame) else ""
    device = device or env.get("gpu") or env.get("cpu") or "an unknown device"
    dtypes = ", ".join(sorted({str(v) for v in frame[COL.dtype] if v is not None})) if len(frame) else "-"
    load = (
        pd.to_numeric(frame[COL.load_per_cpu], errors="coerce").dropna()
        if COL.load_per_cpu in frame
        else pd.Series(dtype=float)
    )
    load_text = (
        f"load per CPU {load.max():.2f} max, {load.median():.2f} median" if len(load) else "load per CPU not recorded"
    )
    threads = f"torch {format_text(env.get('torch_threads'))} threads of {format_text(env.get('cpu_count'))} CPUs"
    return f"Measured on {device}, {dtypes}; {load_text}; {threads}; torch {format_text(env.get('torch'))}."


def memory_budget_section(analysed: AnalysedRun, folder: Path) -> tuple[list[Path], list[Block]]:
    """'Longest trainable N': the cheapest combination per setting at its largest requested N, the search's table per
    train series and its figure (harness.report.lengths); nothing without a memory budget."""
    if analysed.memory_budget is None or analysed.longest is None or not len(analysed.longest):
        return [], []
    budget = format_bytes(analysed.memory_budget)
    blocks: list[Block] = [
        Heading(2, f"Longest trainable N within {budget}"),
        Paragraph(
            f"The memory budget ({budget}) against each train cell's measured peak memory of one forward + backward "
            "(beyond its inputs and weights). The cheapest combination of variant, knob, recompute and precision that "
            "trains at the largest requested N within it (and within the largest error budget):"
        ),
        *[Paragraph(line) for line in cheapest_lines(analysed.frame, analysed.memory_budget)],
        Table(*table_rows(analysed.longest)),
    ]
    written, figures = figure_section(analysed, folder, "memory")
    return written, blocks + figures


# ---- the answer at the end of a sweep -----------------------------------------------------------------
def answer_lines(analysed: AnalysedRun) -> list[str]:
    """What a sweep prints last: the answer at the largest N, one line per setting and input distribution with the
    variants out of reach there, and the answer at each shorter N where it differs; then the memory budget's cheapest
    combinations and what the numbers are on. A run that asked for no error budget gets the fastest config as given,
    no budget named (not the DEFAULT_BUDGETS its report's table answers for)."""
    tables = list(analysed.tables)
    if not analysed.budgets_asked:
        tables = choice.answer_tables(analysed.frame, (math.inf,), analysed.metric, clock=analysed.clock)
    varying = choice.varying_keys(tables)
    lines = []
    for table in tables:
        lines.append(_answer_line(table, table.lengths[-1], varying) + reach.unreached_text(analysed, table))
        lines += [_answer_line(table, n, varying) for n in differing_lengths(table)]
    if analysed.memory_budget is not None:  # the cheapest combination that trains within it (harness.report.lengths)
        lines += cheapest_lines(analysed.frame, analysed.memory_budget)
    if lines and analysed.accuracy_reference != "full":
        lines.append(f"(errors against {analysed.errors_against})")
    note = clock_note(analysed.clock)
    if lines and note:
        lines.append(f"({note})")
    return lines


def table_answers(tables: list[choice.AnswerTable]) -> list[str]:
    """One line per setting and input distribution at its largest N, for the end of a sweep:
    'answer at N=8192 (local): rel_l2<=0.05: sliding_window(window=512) 3.1x [2.9-3.3]; rel_l2<=0.1: dense'."""
    varying = choice.varying_keys(tables)
    return [_answer_line(table, table.lengths[-1], varying) for table in tables]


def differing_lengths(table: choice.AnswerTable) -> list[int]:
    """The shorter N whose winners (variant and config, per budget) are not the largest N's; none under a refusal."""
    if table.refusal:
        return []
    longest = [table.picks[(table.lengths[-1], b)].label for b in table.budgets]
    return [n for n in table.lengths[:-1] if [table.picks[(n, b)].label for b in table.budgets] != longest]


def _answer_line(table: choice.AnswerTable, n: int, varying: list[str]) -> str:
    """'answer at N=8192 (local): rel_l2<=0.05: ...; rel_l2<=0.1: dense'; for an infinite budget (none asked)
    'answer at N=8192 (local), no error budget: sliding_window(window=64) 4.8x [4.1-5.2]'."""
    where = ", ".join(choice.describe(table, [k for k in varying if k != "inputs"]) + [table.inputs])
    if table.refusal:
        return f"answer at N={n} ({where}): {table.refusal}"
    if not any(math.isfinite(b) for b in table.budgets):
        return f"answer at N={n} ({where}), no error budget (each config as given): {table.picks[(n, math.inf)].text()}"
    answers = "; ".join(f"{budget_label(b, table.metric)}: {table.picks[(n, b)].text()}" for b in table.budgets)
    return f"answer at N={n} ({where}): {answers}"
