"""The report's answers: which variant to use per error budget and N, and how each one scales."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.report import analysis, choice
from harness.report.analysed import AnalysedRun
from harness.report.budgets import GENERALISATION_MARGIN, METRIC_NAMES
from harness.report.figures import figure_section
from harness.report.formatting import format_n, format_number, format_text
from harness.report.page import Block, Heading, Paragraph, Table
from harness.schema import BASELINE
from harness.error_metrics import budget_label


def recommendation(analysed: AnalysedRun, folder: Path) -> tuple[list[Path], list[Block]]:
    """'Which one should I use': an intro, a table N x budget per setting and input distribution (choice.py), the
    winner map (in `folder`) and the run's conditions."""
    frame, tables, metric = analysed.frame, list(analysed.tables), analysed.metric
    searched = (
        bool(pd.to_numeric(frame["matched_budget"], errors="coerce").notna().any())
        if "matched_budget" in frame
        else False
    )
    blocks: list[Block] = [
        Heading(2, "Which one should I use"),
        Paragraph(
            _intro(tables, metric, searched=searched, asked=analysed.spec_budgets, against=analysed.errors_against)
        ),
    ]
    for table, title in zip(tables, choice.table_titles(tables)):
        headers = ["N"] + [budget_label(b, metric, ascii=False) for b in table.budgets]
        rows = [[format_n(n)] + [table.picks[(n, b)].text() for b in table.budgets] for n in table.lengths]
        if title:
            blocks.append(Paragraph(f"**{title}**"))
        blocks.append(Table(headers, rows))
        blocks += _out_of_reach(frame, table)
    written, figures = figure_section(analysed, folder, "answer")
    blocks += figures
    blocks.append(Paragraph(conditions(analysed.run.env, frame)))
    return written, blocks


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
    shared = [k for k in list(analysis.SETTING_KEYS) + ["inputs"] if k not in varying]
    if len(tables) > 1 and set(varying) <= {"inputs"}:
        text += f" Setting: {analysis.setting_title(tables[0].setting)}; one table per input distribution."
    elif len(tables) > 1:
        text += " All tables: " + ", ".join(choice.describe(tables[0], shared, skip_defaults=True)) + "."
    else:
        text += f" Setting: {analysis.setting_title(tables[0].setting)}, inputs {tables[0].inputs}."
    return text


def _out_of_reach(frame: pd.DataFrame, table: choice.AnswerTable) -> list[Block]:
    """One line under a table: each variant whose search met no budget somewhere, where, and the best error its
    range reached ('linformer at every N and budget (best 0.77: k=64 at N=256)')."""
    rows = analysis.select(frame, table.setting)
    # an unreachable row without its budget (an older writer's) says nothing about this table's budgets
    rows = rows[(rows["inputs"] == table.inputs) & (rows["status"] == "unreachable") & rows["matched_budget"].notna()]
    parts = []
    for variant, part in rows.groupby("variant", sort=True):
        missed = {(int(r["seq_len"]), float(r["matched_budget"])) for _, r in part.iterrows()}
        uniform = _uniform_error(part)
        if missed >= {(n, b) for n in table.lengths for b in table.budgets}:
            parts.append(f"{variant} at every N and budget{_best_text(part, uniform)}")
            continue
        # each budget with its own best: a near miss of the smaller budget is no reason the larger one was missed
        pieces = []
        for b in table.budgets:
            at_b = part[[float(v) == b for v in part["matched_budget"]]]
            if len(at_b):
                lengths = _lengths_text(sorted(int(n) for n in at_b["seq_len"]))
                pieces.append(
                    f"for {budget_label(b, table.metric, ascii=False)} at {lengths}{_best_text(at_b, uniform)}"
                )
        parts.append(f"{variant} " + "; ".join(pieces))
    blocks = [Paragraph("Out of reach (on the search's held-out seeds): " + "; ".join(parts) + ".")] if parts else []
    all_rows = analysis.select(frame, table.setting)
    uniform = _uniform_error(all_rows[all_rows["inputs"] == table.inputs])
    if table.inputs.split(":")[0] == "gaussian" and uniform is not None:
        blocks.insert(
            0,
            Paragraph(
                f"Why nothing can win on {table.inputs}: iid q and k make the weights near-uniform, so the exact output "
                f"is small (a few % of ||v||) and mostly noise; uniform attention (the mean of v) already scores "
                f"{uniform:.2g} and a zero output 1, and a variant that does not compute nearly every score cannot get "
                "far below that."
            ),
        )
    return blocks


def _best_text(part: pd.DataFrame, uniform: float | None) -> str:
    """' (best 0.31: k=1024 at N=1K)': the lowest error the search of these unreachable rows scored at the top of its
    range on its own (held-out) seeds; '' when none is recorded or finite."""
    tops = [
        (t["tried"].get(str(t["high"])), t["knob"], t["high"], r["seq_len"])
        for _, r in part.iterrows()
        if isinstance(t := r["tuning"], dict) and t.get("tried")
    ]
    best = min(((float(e), *rest) for e, *rest in tops if isinstance(e, (int, float))), default=None)
    if best is None:
        return ""
    text = f" (best {best[0]:.2g}: {best[1]}={best[2]} at N={format_n(int(best[3]))})"
    if uniform is not None and best[0] >= UNIFORM_MARGIN * uniform:
        return f": no better than uniform attention ({uniform:.2g}){text}"
    return text


# An error above this fraction of uniform attention's is "no better than uniform attention", not a near miss.
UNIFORM_MARGIN = 0.9


def _uniform_error(rows: pd.DataFrame) -> float | None:
    """The median uniform-attention error of rows (None when none recorded one)."""
    if "uniform_rel_l2_error" not in rows:
        return None
    values = pd.to_numeric(rows["uniform_rel_l2_error"], errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def _lengths_text(lengths: list[int]) -> str:
    """'N=4K-8K' for a run of lengths, 'N=1K, 4K' otherwise (the table's own N)."""
    if len(lengths) > 1:
        return f"N={format_n(lengths[0])}-{format_n(lengths[-1])}"
    return f"N={format_n(lengths[0])}"


def conditions(env: dict[str, Any], frame: pd.DataFrame) -> str:
    """'Measured on <device>, float32; load per CPU 0.12 max, 0.05 median; torch 2 threads of 2 CPUs; torch 2.3.0.'"""
    device = ", ".join(sorted({str(v) for v in frame["device_name"] if v is not None})) if len(frame) else ""
    device = device or env.get("gpu") or env.get("cpu") or "an unknown device"
    dtypes = ", ".join(sorted({str(v) for v in frame["dtype"] if v is not None})) if len(frame) else "-"
    load = (
        pd.to_numeric(frame["load_per_cpu"], errors="coerce").dropna()
        if "load_per_cpu" in frame
        else pd.Series(dtype=float)
    )
    load_text = (
        f"load per CPU {load.max():.2f} max, {load.median():.2f} median" if len(load) else "load per CPU not recorded"
    )
    threads = f"torch {format_text(env.get('torch_threads'))} threads of {format_text(env.get('cpu_count'))} CPUs"
    return f"Measured on {device}, {dtypes}; {load_text}; {threads}; torch {format_text(env.get('torch'))}."


def scaling(frame: pd.DataFrame) -> list[Block]:
    """The fitted exponents of latency and memory in N, and where each variant becomes faster than dense."""
    exps = analysis.scaling_exponents(frame)
    cross = analysis.crossovers(frame)
    blocks: list[Block] = [
        Heading(2, "Scaling"),
        Paragraph(
            f"Log-log slope of latency and of peak memory in N over the three longest lengths that ran ok, below the "
            f"first length that did not (inputs: {analysis.primary_inputs(frame)}): dense attention should be near 2, "
            "linear-cost variants near 1. Crossover: the N from which a variant is faster than dense at every longer "
            "N where both were timed (interpolated in log-log between the two bracketing lengths); nothing is claimed "
            "beyond the longest such N."
        ),
    ]
    merged = exps.merge(cross, on=list(analysis.SETTING_KEYS) + ["series"], how="left")
    rows = []
    for _, r in merged.iterrows():
        rows.append(
            [
                analysis.setting_title(r.to_dict()),
                r["series"],
                _exponent_text(r["time_exponent"]),
                _exponent_text(r["memory_exponent"]),
                _fit_range_text(r),
                _crossover_text(r),
            ]
        )
    blocks.append(
        Table(["setting", "series", "time exponent", "memory exponent", "fit over N", "faster than dense"], rows)
    )
    return blocks


def _exponent_text(value: float) -> str:
    """'1.98'; a slope that rounds to zero is '0.00', not '-0.00'."""
    return format_number(0.0 if pd.notna(value) and abs(value) < 0.005 else value, ".2f")


def _fit_range_text(r: pd.Series) -> str:
    """'1024-4096', with what stopped the series below its longest length: '256-1024 (timeout at 2048)'."""
    text = f"{r['fit_from']}-{r['fit_to']}" if r["points"] and r["points"] > 1 else "too few points"
    if pd.notna(r.get("stopped_at")):
        text += f" ({r['stopped_status']} at {int(r['stopped_at'])})"
    return text


def _crossover_text(r: pd.Series) -> str:
    if r["series"] == BASELINE or str(r["series"]).startswith(BASELINE + "("):
        return "(baseline)"
    kind = r.get("kind")
    longest = format_n(int(r["longest"])) if pd.notna(r.get("longest")) else "?"
    text = {
        "always": f"at every N both were timed (to {longest})",
        "never": f"not at N={longest}, the longest both were timed",
        "no data": "no N with both timed",
        "crosses": f"from N ~ {r['length']:.0f} (measured to {longest})" if pd.notna(r.get("length")) else "",
    }.get(kind, "-")
    if pd.notna(r.get("dense_oom_from")):
        text += f"; dense out of memory from N={int(r['dense_oom_from'])}"
    return text


def memory_budget_section(analysed: AnalysedRun, folder: Path) -> tuple[list[Path], list[Block]]:
    """'Longest trainable N': the cheapest combination per setting at its largest requested N, the search's table per
    train series and its figure (harness.report.longest); nothing without a memory budget."""
    from harness.report.formatting import format_bytes
    from harness.report.longest import cheapest_lines, table_rows

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
