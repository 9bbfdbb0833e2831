"""The summary a sweep prints at its end: per setting and inputs a table variant x N, then why cells did not run.

Its columns are harness.report.tables' (those with a `summary` name). A cell that did not run shows its status; a series
none of whose cells ran is one line (an unreachable one with the best error its search reached at each N, no blank
metric rows); a noisy or contended timing is marked and its speed-up shows its interval; each distinct refusal or
failure reason is one line with its cell count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from harness.entries import searched_fields
from harness.report.analysis import SETTING_KEYS, axes_title, is_baseline_series, not_run_rows, searched_extras
from harness.report.reach import top_error
from harness.report.render import format_n, format_times, short_reason
from harness.report.tables import COLUMNS, NOISY_MARK, Column, is_noisy
from harness.schema import describe
from harness.store import COL

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

TERMINAL = [c for c in COLUMNS if c.summary]
CONTENDED_MARK = "‡"  # timed while the machine took the cores away (harness.measure.contention)
REASON_WIDTH = 160  # characters of a reason line: enough for the flags a refusal names
# statuses whose reason is shown elsewhere: unreachable (its series' best error), ok (none)
NO_REASON_LINE = ("ok", "unreachable")


def summary_table(analysed: "AnalysedRun") -> str:
    """Variant x N per setting and inputs (the terminal columns; a cell's status where it did not run ok), the marks'
    legend where a cell is marked."""
    frame = analysed.frame
    if not len(frame):
        return "(no rows)"
    marks = _marks(analysed.clock)
    keys = list(SETTING_KEYS) + [COL.inputs]
    blocks = []
    for setting, group in frame.groupby(keys, sort=False):
        s = dict(zip(keys, setting))
        # 'forward float32 causal B=1 H=8 D=64 inputs=local on cpu'
        title = (
            " ".join(describe(s, ("mode", "dtype", "causal", "batch", "heads", "head_dim"), skip_defaults=False))
            + axes_title(s)
            + f" inputs={s['inputs']} on {s['device']}"
        )
        lengths = [int(n) for n in sorted(group[COL.seq_len].unique())]
        lines = [["variant", "metric"] + [format_n(n) for n in lengths]]
        for series, part in group.groupby(COL.series, sort=False):
            by_n = {int(r[COL.seq_len]): r for _, r in part.iterrows()}
            lines += _series_lines(str(series), by_n, lengths, marks)
        blocks.append(f"{title}\n{_aligned(lines)}")
    legend = _legend(frame, marks)
    return "\n\n".join(blocks) + (f"\n{legend}" if legend else "")


def _series_lines(series: str, by_n: dict[int, pd.Series], lengths: list[int], marks: Callable) -> list[list[str]]:
    """A series' metric rows; one line for a series none of whose cells ran ('unreachable' with each N's best error)."""
    if not any(r[COL.status] == "ok" for r in by_n.values()):
        unreachable = any(r[COL.status] == "unreachable" for r in by_n.values())
        return [[series, "unreachable" if unreachable else "status"] + [_not_ran(by_n.get(n)) for n in lengths]]
    knob = next((r[COL.tuning]["knob"] for r in by_n.values() if isinstance(r[COL.tuning], dict)), None)
    metrics: list[tuple[str, Callable[[pd.Series], str]]] = [(c.summary, _cell_text(c, marks)) for c in TERMINAL]
    metrics += [(knob, _knob_text)] if knob else []
    lines = []
    for i, (metric, text) in enumerate(metrics):
        cells = []
        for n in lengths:
            r = by_n.get(n)
            if r is None:
                cells.append("")
            elif r[COL.status] != "ok":
                cells.append(str(r[COL.status]) if i == 0 else "")
            elif isinstance(r.get(COL.impossible), str):  # above the machine's measured limits
                cells.append("impossible" if i == 0 else "")
            else:
                cells.append(text(r))
        lines.append([series if i == 0 else "", metric] + cells)
    return lines


def _not_ran(r: pd.Series | None) -> str:
    """A cell of a series that never ran: 'best 0.34' (the top of its search's range) where unreachable, else its status."""
    if r is None:
        return ""
    if r[COL.status] == "unreachable":
        best = top_error(r)
        return f"best {best:.2g}" if best is not None else "unreachable"
    return str(r[COL.status])


def _marks(clock: str) -> Callable[[pd.Series], str]:
    """A timed row's marks: NOISY_MARK when noisy, CONTENDED_MARK when contended on the wall clock ('' on CPU time)."""

    def marks(r: pd.Series) -> str:
        contended = r.get(COL.contended) is True or r.get(COL.contended) == True  # noqa: E712 - NaN/None: unknown
        return (NOISY_MARK if is_noisy(r) else "") + (CONTENDED_MARK if contended and clock == "wall" else "")

    return marks


def _cell_text(column: Column, marks: Callable[[pd.Series], str]) -> Callable[[pd.Series], str]:
    """The column's compact text; a timed column of a marked row carries the marks, its speed-up the interval."""

    def text(r: pd.Series) -> str:
        plain = (column.compact or column.text)(r)
        mark = marks(r)
        timed = column.field == COL.latency_s or (
            column.field == "dense_speedup" and not is_baseline_series(r[COL.series])
        )
        if not mark or not timed:  # the baseline's own 1.00x is a definition, not a measurement
            return plain
        low, high = r.get(COL.speedup_low, np.nan), r.get(COL.speedup_high, np.nan)
        if column.field == "dense_speedup" and np.isfinite(low) and np.isfinite(high):
            plain += f" [{format_times(low)}-{format_times(high)}]"
        return plain + mark

    return text


def _legend(frame: pd.DataFrame, marks: Callable[[pd.Series], str]) -> str:
    """What the marks mean, for the marks a table used ('' for none)."""
    used = "".join(marks(r) for _, r in frame[frame[COL.status] == "ok"].iterrows())
    parts = [f"{NOISY_MARK} noisy timing (the row's noise_reason says why)"] if NOISY_MARK in used else []
    if CONTENDED_MARK in used:
        parts.append(f"{CONTENDED_MARK} contended: the timing thread lost its core (compare CPU time: --clock cpu)")
    return "; ".join(parts) + ": read the speed-up's 95% interval, not its median" if parts else ""


def _aligned(lines: list[list[str]]) -> str:
    """The table's lines, the first two columns left-aligned, the N columns right-aligned."""
    widths = [max(len(line[c]) for line in lines) for c in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) if c < 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines
    )


def _knob_text(r) -> str:
    """The searched knob's value and the fields searched with it where set: '300', '128 sinks=4'."""
    config = r[COL.config] if isinstance(r[COL.config], dict) else {}
    fields = searched_fields(str(r[COL.variant]))
    if not fields:
        return "-"
    return " ".join([str(config.get(fields[0], "-"))] + searched_extras(r))


def reason_lines(analysed: "AnalysedRun") -> list[str]:
    """One line per distinct reason a cell was refused or failed, most cells first: 'why: 12 cells unsupported:
    inputs 'model': ...'. Unreachable cells (their series' line says how close they came) and cells not run after a
    shorter N failed (the outcome line counts them) have none."""
    frame = analysed.frame
    if not len(frame):
        return []
    failed = frame[~frame[COL.status].isin(NO_REASON_LINE) & ~not_run_rows(frame)]
    reasons = [
        (str(s), " ".join(str(r).split()) if isinstance(r, str) else "")
        for s, r in zip(failed[COL.status], failed[COL.reason])
    ]
    counts = pd.Series(reasons, dtype=object).value_counts(sort=False) if reasons else pd.Series(dtype=int)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [
        f"why: {count} cell{'s' if count > 1 else ''} {status}: {short_reason(reason or None, REASON_WIDTH)}"
        for (status, reason), count in ordered
    ]
