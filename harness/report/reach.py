"""Which variants' searches met no budget, how close they came, and whether they beat uniform attention at all.

One decision, read by the report's out-of-reach line (harness.report.findings) and the sweep's closing answer lines
(harness.report.summary): a variant whose best error over its searched range is at least UNIFORM_MARGIN x the uniform
baseline's (the mean of v over the visible keys, on the same inputs and rows) is "no better than uniform attention",
not a near miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness.report import analysis

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
    rows = rows[(rows["inputs"] == inputs) & (rows["status"] == "unreachable") & rows["matched_budget"].notna()]
    if lengths is not None:
        rows = rows[rows["seq_len"].isin(lengths)]
    out = []
    for variant, part in rows.groupby("variant", sort=True):
        missed = frozenset((int(r["seq_len"]), float(r["matched_budget"])) for _, r in part.iterrows())
        by_budget = {}
        for budget, at_budget in part.groupby("matched_budget", sort=True):
            found = _best(at_budget)
            if found is not None:
                by_budget[float(budget)] = found
        out.append(Unreached(str(variant), missed, _best(part), uniform_error(part), by_budget))
    return out


def _best(rows: pd.DataFrame) -> tuple[float, str, int] | None:
    """The lowest error the searches of these unreachable rows scored at the top of their ranges (on the search's own
    held-out seeds), with the config searched and its N; None when none is recorded or finite."""
    tops = [
        (r["tuning"]["tried"].get(str(r["tuning"]["high"])), _searched_text(r), int(r["seq_len"]))
        for _, r in rows.iterrows()
        if _searched(r["tuning"])
    ]
    return min(((float(e), *rest) for e, *rest in tops if isinstance(e, (int, float))), default=None)


def uniform_error(rows: pd.DataFrame) -> float | None:
    """The median uniform-attention error of rows (None when none recorded one)."""
    if "uniform_rel_l2_error" not in rows:
        return None
    values = pd.to_numeric(rows["uniform_rel_l2_error"], errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def _searched_text(r: pd.Series) -> str:
    """The top of the range a row searched, with the fields searched beside the knob where set: 'window=298 sinks=4'."""
    from harness.entries import searched_fields

    config = r["config"] if isinstance(r["config"], dict) else {}
    extras = [f"{f}={config[f]}" for f in searched_fields(str(r["variant"]))[1:] if config.get(f)]
    return " ".join([f"{r['tuning']['knob']}={r['tuning']['high']}"] + extras)


def _searched(tuning) -> bool:
    return isinstance(tuning, dict) and bool(tuning.get("tried"))
