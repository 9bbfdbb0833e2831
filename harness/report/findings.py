"""The report's answers: which variant to use per error budget and N, and how each one scales."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from harness.report import analysis, choice
from harness.report.formatting import format_number
from harness.report.page import Block, Heading, Paragraph, Table


def recommendation(frame: pd.DataFrame, budgets: Sequence[float]) -> list[Block]:
    """'Which one should I use': the fastest series within each budget, worst over the input distributions,
    then for each distribution alone when several were measured."""
    text = choice.recommend(frame, budgets)
    intro = ("The fastest series whose relative L2 error (worst over the input distributions measured) stays "
             "within each budget, per range of N; computed from the rows below. Approximate variants that "
             "win here may still be wrong for your inputs: check the error table for your distribution.")
    blocks: list[Block] = [Heading(2, "Which one should I use"), Paragraph(intro)] + [Paragraph(t) for t in text]
    distributions = sorted({str(v) for v in frame["inputs"]})
    if len(distributions) > 1:  # the worst case hides what suits inputs like one of them: say that too
        blocks.append(Paragraph("If your attention looks like one of the input distributions measured, the answer for it alone:"))
        for dist in distributions:
            blocks += [Paragraph(f"Inputs {dist}: {t}") for t in choice.recommend(frame[frame["inputs"] == dist], budgets)]
    return blocks


def scaling(frame: pd.DataFrame) -> list[Block]:
    """The fitted exponents of latency and memory in N, and where each variant becomes faster than dense."""
    exps = analysis.scaling_exponents(frame)
    cross = analysis.crossovers(frame)
    blocks: list[Block] = [Heading(2, "Scaling"), Paragraph(
        f"Log-log slope of latency and of peak memory in N over the three longest lengths that ran "
        f"(inputs: {analysis.primary_inputs(frame)}): dense attention should be near 2, linear-cost variants near 1. "
        "Crossover: the N from which a variant is faster than dense at every longer measured N "
        "(interpolated in log-log between the two bracketing lengths).")]
    merged = exps.merge(cross, on=list(analysis.SETTING_KEYS) + ["series"], how="left")
    rows = []
    for _, r in merged.iterrows():
        rows.append([
            analysis.setting_title(r.to_dict()), r["series"], format_number(r["time_exponent"], ".2f"),
            format_number(r["memory_exponent"], ".2f"),
            f"{r['fit_from']}-{r['fit_to']}" if r["points"] and r["points"] > 1 else "too few points",
            _crossover_text(r),
        ])
    blocks.append(Table(["setting", "series", "time exponent", "memory exponent", "fit over N", "faster than dense"], rows))
    return blocks


def _crossover_text(r: pd.Series) -> str:
    if r["series"] == analysis.BASELINE or str(r["series"]).startswith(analysis.BASELINE + "("):
        return "(baseline)"
    kind = r.get("kind")
    text = {
        "always": "at every N measured",
        "never": "not at the longest N measured",
        "no data": "no N with both timed",
        "crosses": f"from N ~ {r['length']:.0f}" if pd.notna(r.get("length")) else "",
    }.get(kind, "-")
    if pd.notna(r.get("dense_oom_from")):
        text += f"; dense out of memory from N={int(r['dense_oom_from'])}"
    return text
