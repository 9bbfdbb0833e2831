"""What a sweep prints at the end, from the run analysed once: variant x N per setting and inputs (the terminal
columns of harness.report.columns, and for a series matched to an error budget the knob value found at each N), and
the answer at the largest N."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.report.analysis import SETTING_KEYS, axes_title
from harness.report.clock import clock_note, contended_count
from harness.report.columns import COLUMNS
from harness.report.overview import NOT_RUN_WHY, not_run_rows
from harness.report.render import format_n
from harness.schema import STATUSES, describe

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

TERMINAL = [c for c in COLUMNS if c.summary]


def summary_table(analysed: "AnalysedRun") -> str:
    """Variant x N per setting and inputs: the terminal columns (status where a cell did not run ok)."""
    frame = analysed.frame
    if not len(frame):
        return "(no rows)"
    keys = list(SETTING_KEYS) + ["inputs"]
    blocks = []
    for setting, group in frame.groupby(keys, sort=False):
        s = dict(zip(keys, setting))
        # 'forward float32 causal B=1 H=8 D=64 inputs=local on cpu'
        title = (
            " ".join(describe(s, ("mode", "dtype", "causal", "batch", "heads", "head_dim"), skip_defaults=False))
            + axes_title(s)
            + f" inputs={s['inputs']} on {s['device']}"
        )

        lengths = sorted(group["seq_len"].unique())
        header = ["variant", "metric"] + [format_n(n) for n in lengths]
        lines = [header]
        for series, part in group.groupby("series", sort=False):
            by_n = {int(r["seq_len"]): r for _, r in part.iterrows()}
            knob = next((r["tuning"]["knob"] for r in by_n.values() if isinstance(r["tuning"], dict)), None)
            metrics = [(c.summary, c.compact or c.text) for c in TERMINAL]
            metrics += [(knob, _knob_text)] if knob else []
            for i, (metric, text) in enumerate(metrics):
                cells = []
                for n in lengths:
                    r = by_n.get(int(n))
                    if r is None:
                        cells.append("")
                    elif r["status"] != "ok":
                        cells.append(str(r["status"]) if i == 0 else "")
                    elif isinstance(r.get("impossible"), str):  # above the machine's measured limits
                        cells.append("impossible" if i == 0 else "")
                    else:
                        cells.append(text(r))
                lines.append([series if i == 0 else "", metric] + cells)
        widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
        text = "\n".join(
            "  ".join(
                cell.ljust(w) if c < 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(line, widths))
            ).rstrip()
            for line in lines
        )
        blocks.append(f"{title}\n{text}")
    return "\n\n".join(blocks)


def _knob_text(r) -> str:
    """The searched knob's value and the fields searched with it where set: '300', '128 sinks=4'."""
    from harness.entries import searched_fields

    config = r["config"] if isinstance(r["config"], dict) else {}
    fields = searched_fields(str(r["variant"]))
    if not fields:
        return "-"
    return " ".join([str(config.get(fields[0], "-"))] + [f"{f}={config[f]}" for f in fields[1:] if config.get(f)])


def answer_lines(analysed: "AnalysedRun") -> list[str]:
    """The report's answer at the largest N, one line per setting and input distribution (harness.report.choice)."""
    from harness.report import choice

    tables = list(analysed.tables)
    lines = [line + _unreached_text(analysed, t) for line, t in zip(choice.answer_lines(tables), tables)]
    if analysed.memory_budget is not None:  # the cheapest combination that trains within it (harness.report.longest)
        from harness.report.longest import cheapest_lines

        lines += cheapest_lines(analysed.frame, analysed.memory_budget)
    if lines and analysed.accuracy_reference != "full":
        lines.append(f"(errors against {analysed.errors_against})")
    note = clock_note(analysed.clock)
    if lines and note:
        lines.append(f"({note})")
    return lines


def _unreached_text(analysed: "AnalysedRun", table) -> str:
    """'; out of reach: linformer no better than uniform attention (uniform 0.79), sliding_window for rel_l2<=0.05
    (best 0.38)' for the variants whose search met no budget at the table's largest N (the budgets named where it met
    some); harness.report.reach decides the verdict, as for the report's out-of-reach line."""
    from harness.error_metrics import budget_label
    from harness.report.reach import unreached

    texts = []
    for m in unreached(analysed.frame, table.setting, table.inputs, lengths=(table.lengths[-1],)):
        missed = sorted(b for _, b in m.missed)
        where = (
            ""
            if set(missed) >= set(table.budgets)
            else " for " + ", ".join(budget_label(b, table.metric) for b in missed)
        )
        note = f" {m.verdict()}" if m.verdict() else (f" (best {m.best[0]:.2g})" if m.best else "")
        texts.append(f"{m.variant}{where}{note}")
    return f"; out of reach: {', '.join(texts)}" if texts else ""


def outcome_line(analysed: "AnalysedRun") -> str:
    """How the run went, in one line: cells by status (those not run after a shorter N failed, apart), how many timed
    cells are noisy and contended, and the load they were measured under: 'cells: 62 ok, 14 timeout, 20 not run (...);
    29 of 29 timed cells noisy, 27 of 29 contended (...); load 14.2 per CPU (median of the cells; timings then follow
    the machine, not the code)'."""
    import pandas as pd

    from harness.measure.contention import CONTENDED_SHARE
    from harness.measure.noise import HIGH_LOAD_PER_CPU

    frame = analysed.frame
    if not len(frame):
        return "cells: none ran"
    not_run = not_run_rows(frame)
    counts = frame.loc[~not_run, "status"].value_counts()
    order = [s for s in STATUSES if s in counts] + sorted(set(counts.index) - set(STATUSES))
    parts = [f"{counts[s]} {s}" for s in order]
    if not_run.any():
        parts.append(f"{int(not_run.sum())} not run ({NOT_RUN_WHY})")
    text = "cells: " + ", ".join(parts)
    noisy = frame["noisy"] if "noisy" in frame else pd.Series(dtype=object)
    timed = noisy.notna()
    if timed.any():
        text += f"; {int(noisy[timed].astype(bool).sum())} of {int(timed.sum())} timed cells noisy"
    contended, known = contended_count(frame)
    if known:  # harness.measure.contention: the timing thread was off its core most of the time
        text += f"{',' if timed.any() else '; timed cells:'} {contended} of {known} contended "
        text += f"(on a core under {CONTENDED_SHARE:.0%} of their timed wall time)"
    load = pd.to_numeric(frame.get("load_per_cpu", pd.Series(dtype=float)), errors="coerce").dropna()
    if len(load):
        median = float(load.median())
        busy = median >= HIGH_LOAD_PER_CPU
        text += f"; load {median:.1f} per CPU (median of the cells{'; timings then follow the machine, not the code' if busy else ''})"
    return text
