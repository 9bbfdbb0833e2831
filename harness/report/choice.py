"""Which one should I use: per setting and inputs, a table N x error budget of the fastest candidate within budget.

Each cell names the winner at that N and budget, trusting only what the intervals show.

Pure numbers over a frame with dense ratios (analysis.with_dense_ratios) and errors (budgets.with_budgets);
the conventions (settings, the dense baseline, paired speed-ups) are analysis.py's, the candidates at a
budget analysis.py's (`within`).

A cell's winner (pick):
- candidates rank by their paired speed-up over dense (by latency where no row has one: dense did not run);
- a variant beats dense only when it is reliably faster: its paired interval's low end is above 1 (rows
  without an interval: its p20-p80 latency range lies below dense's); when none is, the answer is dense;
- a winner whose interval (or latency range) overlaps the runner-up's is a tie, and the runner-up is named.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from harness.entries import config_label, knob_field
from harness.report import analysis
from harness.report.analysis import SETTING_KEYS
from harness.report.clock import refusal
from harness.report.render import finite, format_seconds, format_times
from harness.schema import BASELINE
from harness.schema import describe as describe_cell, series_suffix
from harness.store import COL

NONE_RAN = "none within budget ran"


@dataclass(frozen=True)
class Pick:
    """The answer of one cell: the winner at one N and budget (label None: no candidate ran)."""

    label: str | None  # the winner's variant and config, its quality knob named: "sliding_window(window=512)"
    variant: str | None  # the winner's variant (its colour in the winner map)
    speedup: float = math.nan  # paired median speed-up over dense (1 for dense itself; NaN where dense did not run)
    low: float = math.nan  # the paired 95% interval (NaN for rows without one)
    high: float = math.nan
    latency_s: float = math.nan  # the winner's median latency
    tie: str | None = None  # the runner-up whose interval overlaps the winner's
    # where dense did not run at this N: its status ("oom"...); None where it was not in the run
    dense_status: str | None = None
    # the winner's error where it is above the budget (a matched row within the margin)
    over_budget: float | None = None
    why: str | None = None  # where no candidate ran: why ("dense timed out; 3 timeout, 2 not run")

    def text(self) -> str:
        """'sliding_window(window=512) 3.1x [2.9-3.3] (tie: chunked)', '... (error 0.052)' above the budget, 'dense',
        or NONE_RAN with why: 'none within budget ran (dense timed out; 3 timeout)'."""
        if self.label is None:
            return f"{NONE_RAN} ({self.why})" if self.why else NONE_RAN
        notes = [f"error {self.over_budget:.3g}"] if self.over_budget is not None else []
        notes += [f"tie: {self.tie}"] if self.tie else []
        note = f" ({'; '.join(notes)})" if notes else ""
        if self.variant == BASELINE and self.speedup == 1:
            return f"{self.label}{note}"
        return f"{self.label} {self.figure()}{note}"

    def figure(self) -> str:
        """The winner's number alone: '3.1x [2.9-3.3]', '3.1x', or its latency where dense did not run."""
        if not math.isfinite(self.speedup):
            dense = f", dense {self.dense_status}" if self.dense_status else ""
            return f"{format_seconds(self.latency_s)}{dense}"
        interval = (
            f" [{format_times(self.low)}-{format_times(self.high)}]"
            if math.isfinite(self.low) and math.isfinite(self.high)
            else ""
        )
        return f"{format_times(self.speedup)}x{interval}"


@dataclass(frozen=True)
class AnswerTable:
    """One setting and input distribution: a Pick per (N, budget)."""

    setting: dict  # the SETTING_KEYS values
    inputs: str
    budgets: tuple[float, ...]
    metric: str  # "rel_l2" or "cosine"
    lengths: tuple[int, ...]  # every N with a row in this setting and inputs, ascending
    picks: dict[tuple[int, float], Pick]  # (N, budget) -> its winner
    refusal: str | None = None  # why there is no verdict (most timed cells contended: harness.report.clock)


def answer_tables(
    frame: pd.DataFrame, budgets: Sequence[float], metric: str, *, clock: str = "wall"
) -> list[AnswerTable]:
    """One table per setting and input distribution with at least one ok row, for these budgets in this metric; a
    table whose timed cells are mostly contended on the wall clock carries its refusal (harness.report.clock)."""
    tables = []
    for setting in analysis.settings(frame):
        rows = analysis.select(frame, setting)
        for inputs, part in rows.groupby(COL.inputs, sort=True):
            if not (part[COL.status] == "ok").any():
                continue
            lengths = tuple(sorted(int(n) for n in set(part[COL.seq_len])))
            ok = part[(part[COL.status] == "ok") & analysis.possible(part)]  # an impossible row is never a winner
            picks = {}
            for n in lengths:
                at_n = ok[ok[COL.seq_len] == n]
                dense_status = _dense_status(part[part[COL.seq_len] == n])
                for budget in budgets:
                    candidates = _one_per_config(at_n[analysis.within(at_n, budget, metric)], budget)
                    chosen = _over_budget(pick(candidates, dense_status=dense_status), candidates, budget)
                    if chosen.label is None:
                        chosen = dataclasses.replace(chosen, why=why_none(part[part[COL.seq_len] == n], len(at_n)))
                    picks[(n, budget)] = chosen
            tables.append(
                AnswerTable(setting, str(inputs), tuple(budgets), metric, lengths, picks, refusal(part, clock))
            )
    return tables


def pick(candidates: pd.DataFrame, *, dense_status: str | None = None) -> Pick:
    """The winner among the ok candidate rows of one N and budget (see the module doc)."""
    if not len(candidates):
        return Pick(None, None, dense_status=dense_status)  # the winner map says why dense is not the answer
    rows = [r for _, r in candidates.iterrows()]
    if any(_finite(r["dense_speedup"]) for r in rows):
        rows.sort(key=lambda r: -r["dense_speedup"] if _finite(r["dense_speedup"]) else math.inf)
    else:
        rows.sort(key=lambda r: r[COL.latency_s] if _finite(r[COL.latency_s]) else math.inf)
        return _pick_of(
            rows[0], tie=rows[1] if len(rows) > 1 and _overlap(rows[0], rows[1]) else None, dense_status=dense_status
        )
    dense = next((r for r in rows if r[COL.variant] == BASELINE and r["dense_speedup"] == 1), None)
    dense = dense if dense is not None else next((r for r in rows if analysis.is_baseline_series(r[COL.series])), None)
    faster = [r for r in rows if r is not dense and _beats_dense(r, dense)]
    if faster:
        winner = faster[0]
        after = rows[rows.index(winner) + 1 :]
        runner_up = after[0] if after else None
        return _pick_of(winner, tie=runner_up if runner_up is not None and _overlap(winner, runner_up) else None)
    if dense is None:
        return _pick_of(rows[0])
    rival = next((r for r in rows if r is not dense), None)
    return _pick_of(dense, tie=rival if rival is not None and _overlap(dense, rival) else None)


def varying_keys(tables: list[AnswerTable]) -> list[str]:
    """The setting keys (and "inputs") whose value differs between the tables: all a caption needs to name."""
    keys = list(SETTING_KEYS) + [COL.inputs]
    values = [{**t.setting, "inputs": t.inputs} for t in tables]
    return [k for k in keys if len({str(v.get(k)) for v in values}) > 1]


def table_titles(tables: Sequence[AnswerTable]) -> list[str]:
    """What tells each table apart ('float32, causal, inputs local'): the varying keys; '' each when there is one table."""
    if len(tables) < 2:
        return [""] * len(tables)
    varying = varying_keys(list(tables))
    return [", ".join(describe(t, varying)) for t in tables]


def describe(table: AnswerTable, keys: Sequence[str], *, skip_defaults: bool = False) -> list[str]:
    """The table's value of each key, for people: 'float32', 'causal', 'H=8', 'inputs local'... (harness.schema.describe);
    skip_defaults leaves out the axes at their default (H_kv = H, prefill, attention, no padding)."""
    return describe_cell({**table.setting, "inputs": table.inputs}, keys, skip_defaults=skip_defaults)


# ---- helpers -----------------------------------------------------------------------------------------
def _pick_of(r: pd.Series, *, tie: pd.Series | None = None, dense_status: str | None = None) -> Pick:
    return Pick(
        config_text(r),
        str(r[COL.variant]),
        float(r["dense_speedup"]),
        float(r[COL.speedup_low]),
        float(r[COL.speedup_high]),
        float(r[COL.latency_s]),
        config_text(tie) if tie is not None else None,
        dense_status,
    )


def config_text(r: pd.Series) -> str:
    """A row's variant and config as the answer names it, its quality knob named even at its default, and its series
    fields away from their defaults: 'sliding_window(window=512)', 'dense[kv=int8]'."""
    field = knob_field(str(r[COL.variant]))
    config = r[COL.config] if isinstance(r[COL.config], dict) else {}
    return config_label(str(r[COL.variant]), config, show=(field,) if field else ()) + series_suffix(r)


def _over_budget(winner: Pick, candidates: pd.DataFrame, budget: float) -> Pick:
    """The pick with its error noted where the winning row is above the budget (within the margin it was matched to)."""
    if winner.label is None:
        return winner
    row = next((r for _, r in candidates.iterrows() if config_text(r) == winner.label), None)
    error = float(row["error"]) if row is not None and _finite(row.get("error")) else math.nan
    return dataclasses.replace(winner, over_budget=error) if error > budget else winner


def _one_per_config(candidates: pd.DataFrame, budget: float) -> pd.DataFrame:
    """One row per (variant, config): the same config found for two budgets is one candidate, not a tie with itself;
    the row matched to this budget is kept."""
    if not len(candidates):
        return candidates
    matched_here = (
        pd.to_numeric(candidates[COL.matched_budget], errors="coerce").eq(budget)
        if COL.matched_budget in candidates
        else False
    )
    order = candidates.assign(_here=matched_here).sort_values("_here", ascending=False, kind="stable")
    labels = [config_text(r) for _, r in order.iterrows()]
    return order[~pd.Series(labels, index=order.index).duplicated()].drop(columns="_here")


def why_none(at_n: pd.DataFrame, ok_candidates: int) -> str | None:
    """Why no candidate within a budget ran at one N: dense's fate, the other cells' statuses (those not run after a
    shorter N failed apart) and the ok ones that missed the budget: 'dense timed out; 3 timeout, 2 not run; 1 ran
    outside the budget'. None when there is nothing to say."""
    not_run = analysis.not_run_rows(at_n)
    parts = []
    dense = at_n[analysis.baseline_rows(at_n)]
    if len(dense) and not (dense[COL.status] == "ok").any():
        status = str(dense[COL.status].iloc[0])
        fate = FATES.get(status, status)
        parts.append(f"dense not run ({fate} at a shorter N)" if not_run[dense.index[0]] else f"dense {fate}")
    others = ~analysis.baseline_rows(at_n)
    statuses = at_n[COL.status].astype(str).where(~not_run, "not run")[others & (at_n[COL.status] != "ok")]
    if len(statuses):
        parts.append(", ".join(f"{int(k)} {s}" for s, k in statuses.value_counts().items()))
    if ok_candidates:
        parts.append(f"{ok_candidates} ran outside the budget")
    return "; ".join(parts) or None


FATES = {"timeout": "timed out", "oom": "ran out of memory"}  # how a status reads after "dense"


def _dense_status(at_n: pd.DataFrame) -> str | None:
    """Dense's status at one N where it did not run ok (None when it ran, or was not in the run)."""
    dense = at_n[analysis.baseline_rows(at_n)]
    if not len(dense) or (dense[COL.status] == "ok").any():
        return None
    return str(dense[COL.status].iloc[0])


def _finite(x) -> bool:
    return finite(x) is not None


def _interval(r: pd.Series) -> tuple[float, float] | None:
    """A row's paired speed-up interval; the dense baseline's is exactly 1 (it is the reference)."""
    if _finite(r[COL.speedup_low]) and _finite(r[COL.speedup_high]):
        return float(r[COL.speedup_low]), float(r[COL.speedup_high])
    if r[COL.variant] == BASELINE and r["dense_speedup"] == 1:
        return 1.0, 1.0
    return None


def _latency_range(r: pd.Series) -> tuple[float, float] | None:
    low, high = r.get(COL.latency_p20_s), r.get(COL.latency_p80_s)
    return (float(low), float(high)) if _finite(low) and _finite(high) else None


def _overlap(a: pd.Series, b: pd.Series) -> bool:
    """Whether two rows cannot be told apart: paired intervals that intersect, else p20-p80 latency ranges that do."""
    for ranges in ((_interval(a), _interval(b)), (_latency_range(a), _latency_range(b))):
        if ranges[0] and ranges[1]:
            return max(ranges[0][0], ranges[1][0]) <= min(ranges[0][1], ranges[1][1])
    return False


def _beats_dense(r: pd.Series, dense: pd.Series | None) -> bool:
    """Reliably faster than dense: a paired interval above 1; without one, a latency range below dense's."""
    if not (_finite(r["dense_speedup"]) and r["dense_speedup"] > 1):
        return False
    interval = _interval(r)
    if interval:
        return interval[0] > 1
    return dense is None or not _overlap(r, dense)
