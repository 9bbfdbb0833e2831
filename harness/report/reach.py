"""Which variants' searches met no budget, how close they came, and whether they beat uniform attention at all.

One decision, and the two places it is said: the report's out-of-reach line under each answer table and the sweep's
closing answer lines (harness.report.findings). A variant whose best error over its searched range is at least UNIFORM_MARGIN x the uniform
baseline's (the mean of v over the visible keys, on the same inputs and rows) is "no better than uniform attention",
not a near miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from harness.error_metrics import budget_label
from harness.report import analysis
from harness.report.render import Block, Paragraph, format_lengths, format_n
from harness.store import COL

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun
    from harness.report.choice import AnswerTable

# An error above this fraction of uniform attention's is "no better than uniform attention", not a near miss.
UNIFORM_MARGIN = 0.9


@dataclass(frozen=True)
class Unreached:
    """A variant whose search met no budget at some (N, budget) of a table."""

    variant: str
    missed: frozenset[tuple[int, float]]  # (N, budget) where it was unreachable
    # (error, config searched, N): the lowest error at the top of a range searched, its config 'window=298 sinks=4'
    best: tuple[float, str, int] | None
    uniform: float | None  # the median uniform-attention error of its rows
    # each budget's own best: a near miss of the smaller budget is no reason the larger one was missed
    best_by_budget: dict[float, tuple[float, str, int]] = field(default_factory=dict)

    def no_better_than_uniform(self) -> bool:
        return self.best is not None and self.uniform is not None and self.best[0] >= UNIFORM_MARGIN * self.uniform

    def verdict(self) -> str:
        """'no better than uniform attention (uniform 0.79)' when it is; else ''."""
        return f"no better than uniform attention (uniform {self.uniform:.2g})" if self.no_better_than_uniform() else ""


def unreached(
    frame: pd.DataFrame, setting: dict, inputs: str, lengths: tuple[int, ...] | None = None
) -> list[Unreached]:
    """The variants unreachable somewhere in a table's setting and inputs (at `lengths` only, when given), by name."""
    rows = analysis.select(frame, setting)
    # an unreachable row without its budget (an older writer's) says nothing about a table's budgets
    rows = rows[(rows[COL.inputs] == inputs) & (rows[COL.status] == "unreachable") & rows[COL.matched_budget].notna()]
    if lengths is not None:
        rows = rows[rows[COL.seq_len].isin(lengths)]
    out = []
    for variant, part in rows.groupby(COL.variant, sort=True):
        missed = frozenset((int(r[COL.seq_len]), float(r[COL.matched_budget])) for _, r in part.iterrows())
        by_budget = {}
        for budget, at_budget in part.groupby(COL.matched_budget, sort=True):
            found = _best(at_budget)
            if found is not None:
                by_budget[float(budget)] = found
        out.append(Unreached(str(variant), missed, _best(part), uniform_error(part), by_budget))
    return out


def _best(rows: pd.DataFrame) -> tuple[float, str, int] | None:
    """The lowest error the searches of these unreachable rows scored at the top of their ranges (on the search's own
    held-out seeds), with the config searched and its N; None when none is recorded or finite."""
    errors = ((top_error(r), r) for _, r in rows.iterrows())
    return min(((e, _searched_text(r), int(r[COL.seq_len])) for e, r in errors if e is not None), default=None)


def top_error(r: pd.Series) -> float | None:
    """The error one row's search scored at the top of its range (its held-out seeds); None when none is recorded."""
    if not _searched(r[COL.tuning]):
        return None
    error = r[COL.tuning]["tried"].get(str(r[COL.tuning]["high"]))
    return float(error) if isinstance(error, (int, float)) else None


def uniform_error(rows: pd.DataFrame) -> float | None:
    """The median uniform-attention error of rows (None when none recorded one)."""
    if "uniform_rel_l2_error" not in rows:
        return None
    values = pd.to_numeric(rows[COL.uniform_rel_l2_error], errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def _searched_text(r: pd.Series) -> str:
    """The top of the range a row searched, with the fields searched beside the knob where set: 'window=298 sinks=4'."""
    return " ".join([f"{r[COL.tuning]['knob']}={r[COL.tuning]['high']}"] + analysis.searched_extras(r))


def _searched(tuning) -> bool:
    return isinstance(tuning, dict) and bool(tuning.get("tried"))


# ---- what the report and the terminal say ----------------------------------------------------------
def out_of_reach(frame: pd.DataFrame, table: AnswerTable) -> list[Block]:
    """One line under a table: each variant whose search met no budget somewhere, where, the best error its range
    reached, and whether that is no better than uniform attention ('linformer at every N and
    budget: no better than uniform attention (uniform 0.79) (best 0.77: k=64 at N=256)')."""
    parts = []
    everywhere = {(n, b) for n in table.lengths for b in table.budgets}
    for miss in unreached(frame, table.setting, table.inputs):
        verdict = f": {miss.verdict()}" if miss.verdict() else ""
        if miss.missed >= everywhere:
            parts.append(f"{miss.variant} at every N and budget{verdict}{_best_text(miss.best)}")
            continue
        pieces = [  # each budget with its own best (a near miss of the smaller one is no reason the larger was missed)
            f"for {budget_label(b, table.metric, ascii=False)} at "
            f"{format_lengths(sorted(n for n, bb in miss.missed if bb == b))}{_best_text(miss.best_by_budget.get(b))}"
            for b in table.budgets
            if any(bb == b for _, bb in miss.missed)
        ]
        parts.append(f"{miss.variant} " + "; ".join(pieces) + verdict)
    blocks = [Paragraph("Out of reach (on the search's held-out seeds): " + "; ".join(parts) + ".")] if parts else []
    all_rows = analysis.select(frame, table.setting)
    uniform = uniform_error(all_rows[all_rows[COL.inputs] == table.inputs])
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


def _best_text(best: tuple[float, str, int] | None) -> str:
    """' (best 0.31: k=1024 at N=1K)', or '' without a recorded best."""
    return f" (best {best[0]:.2g}: {best[1]} at N={format_n(best[2])})" if best else ""


def unreached_text(analysed: AnalysedRun, table: AnswerTable) -> str:
    """'; out of reach: linformer no better than uniform attention (uniform 0.79), sliding_window for rel_l2<=0.05
    (best 0.38)' for the variants whose search met no budget at the table's largest N (the budgets named where it met
    some), the verdict as in the report's out-of-reach line."""
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
