"""How the cost grows: with N (scaling exponents, and where each variant becomes faster than dense: the Scaling
section) and with scope (attention's share of a transformer block: the layer section).

The numbers are pure functions over a frame with dense ratios (harness.report.analysis); the sections render them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from harness.report import analysis
from harness.report.render import (
    Block,
    Heading,
    Paragraph,
    Table,
    format_n,
    format_number,
    format_ratio,
    format_seconds,
)
from harness.store import COL


# ---- scaling exponents --------------------------------------------------------------------------
def fit_exponent(n: Sequence[float], y: Sequence[float], *, last: int = 3) -> float:
    """The log-log slope of y in n over the `last` longest lengths with a positive y (NaN if < 2 points).

    Dense attention's time and memory grow as N^2 (slope near 2); efficient variants near 1. The
    longest lengths are used because fixed overheads flatten the curve at short N.
    """
    points = sorted(
        (float(a), float(b)) for a, b in zip(n, y) if a and a > 0 and b is not None and np.isfinite(b) and b > 0
    )
    points = points[-last:] if last else points
    if len({a for a, _ in points}) < 2:
        return float("nan")
    x = np.log([a for a, _ in points])
    z = np.log([b for _, b in points])
    slope, _ = np.polyfit(x, z, 1)
    return float(slope)


def scaling_exponents(frame: pd.DataFrame, *, last: int = 3, inputs: str | None = None) -> pd.DataFrame:
    """Per setting and series: the fitted exponent of latency and of peak memory in N, and the N range used.

    Uses rows of one input distribution (`inputs`, default analysis.primary_inputs(frame)), and of each series only the lengths
    that ran ok below its first length without an ok row (`stopped_at`, its status `stopped_status`): a fit never
    spans a timeout or an OOM, whose neighbours were often measured under other conditions.
    """
    columns = list(analysis.SETTING_KEYS) + [
        "series",
        "time_exponent",
        "memory_exponent",
        "fit_from",
        "fit_to",
        "points",
    ]
    columns += ["stopped_at", "stopped_status"]
    if not len(frame):
        return pd.DataFrame(columns=columns)
    inputs = inputs or analysis.primary_inputs(frame)
    rows = frame[frame[COL.inputs] == inputs]
    records = []
    for key, series in rows.groupby(list(analysis.SETTING_KEYS) + [COL.series], dropna=False, sort=True):
        if not (series[COL.status] == "ok").any():
            continue
        stopped_at, stopped_status = _first_failure(series)
        ok = series[(series[COL.status] == "ok") & (series[COL.seq_len] < (stopped_at or math.inf))]
        group = ok.groupby(COL.seq_len, as_index=False)[[COL.latency_s, COL.peak_memory_bytes]].median()
        lengths = sorted(group[COL.seq_len])[-last:]
        records.append(
            dict(
                zip(list(analysis.SETTING_KEYS) + [COL.series], analysis.group_key(key)),
                time_exponent=fit_exponent(group[COL.seq_len], group[COL.latency_s], last=last),
                memory_exponent=fit_exponent(group[COL.seq_len], group[COL.peak_memory_bytes], last=last),
                fit_from=int(lengths[0]) if lengths else None,
                fit_to=int(lengths[-1]) if lengths else None,
                points=len(lengths),
                stopped_at=stopped_at,
                stopped_status=stopped_status,
            )
        )
    return pd.DataFrame(records, columns=columns)


def _first_failure(series: pd.DataFrame) -> tuple[int | None, str | None]:
    """The shortest N of a series with rows but none ok, and its status; (None, None) when every N ran ok."""
    for n, at_n in series.sort_values(COL.seq_len).groupby(COL.seq_len, sort=True):
        if not (at_n[COL.status] == "ok").any():
            return int(n), str(at_n[COL.status].iloc[0])
    return None, None


# ---- crossover ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Crossover:
    """Where a variant becomes faster than dense, from two measured latency curves."""

    kind: str  # "always" (faster at every shared N), "crosses" (faster from length on), "never" (not faster at the longest shared N), "no data"
    # the interpolated N where the ratio crosses 1 (kind "crosses"); the shortest shared N for "always"
    length: float | None
    longest: float | None = None  # the longest N where both were timed: nothing is claimed beyond it


def crossover_length(n: Sequence[float], t_variant: Sequence[float], t_dense: Sequence[float]) -> Crossover:
    """The length from which t_variant < t_dense holds at every longer measured N.

    Between the last N where the variant is not faster and the next one, log(ratio) is interpolated
    linearly in log(N), which is exact for two power laws. Points where either time is missing are ignored.
    """
    points = sorted(
        (float(a), float(b) / float(c))
        for a, b, c in zip(n, t_variant, t_dense)
        if b is not None and c is not None and np.isfinite(b) and np.isfinite(c) and b > 0 and c > 0
    )
    if not points:
        return Crossover("no data", None)
    longest = points[-1][0]
    slower = [i for i, (_, r) in enumerate(points) if r >= 1.0]
    if not slower:
        return Crossover("always", points[0][0], longest)
    i = slower[-1]
    if i == len(points) - 1:
        return Crossover("never", None, longest)
    (n0, r0), (n1, r1) = points[i], points[i + 1]
    frac = math.log(r0) / (math.log(r0) - math.log(r1))  # r0 >= 1 > r1, so 0 <= frac < 1
    return Crossover("crosses", float(math.exp(math.log(n0) + frac * (math.log(n1) - math.log(n0)))), longest)


def crossovers(frame: pd.DataFrame, *, inputs: str | None = None) -> pd.DataFrame:
    """Per setting and non-dense series: the crossover with dense, and the first N where dense ran out of memory.

    `frame` must carry dense ratios (with_dense_ratios). Uses one input distribution.
    """
    columns = list(analysis.SETTING_KEYS) + ["series", "kind", "length", "longest", "dense_oom_from"]
    inputs = inputs or analysis.primary_inputs(frame)
    rows = frame[(frame[COL.inputs] == inputs) & ~analysis.baseline_rows(frame)] if len(frame) else frame
    records = []
    for key, group in rows.groupby(list(analysis.SETTING_KEYS) + [COL.series], dropna=False, sort=True):
        ok = (
            group[group[COL.status] == "ok"]
            .groupby(COL.seq_len, as_index=False)[["latency_s", "dense_latency_s"]]
            .median()
        )
        result = crossover_length(ok[COL.seq_len], ok[COL.latency_s], ok["dense_latency_s"])
        oom = group[(group["dense_status"] == "oom")][COL.seq_len]
        records.append(
            dict(
                zip(list(analysis.SETTING_KEYS) + [COL.series], analysis.group_key(key)),
                kind=result.kind,
                length=result.length,
                longest=result.longest,
                dense_oom_from=int(oom.min()) if len(oom) else None,
            )
        )
    return pd.DataFrame(records, columns=columns)


# ---- the Scaling section ------------------------------------------------------------------------------
def scaling(frame: pd.DataFrame) -> list[Block]:
    """The fitted exponents of latency and memory in N, and where each variant becomes faster than dense."""
    exps = scaling_exponents(frame)
    cross = crossovers(frame)
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
    merged = exps.merge(cross, on=list(analysis.SETTING_KEYS) + [COL.series], how="left")
    rows = []
    for _, r in merged.iterrows():
        rows.append(
            [
                analysis.setting_title(r.to_dict()),
                r[COL.series],
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
    if analysis.is_baseline_series(r[COL.series]):
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


# ---- attention inside a layer -------------------------------------------------------------------------
BLOCK_KEYS = tuple(k for k in analysis.SETTING_KEYS if k != "scope")  # a setting, both scopes together


def layer_share(frame: pd.DataFrame) -> list[Block]:
    """Per setting and N: dense attention / dense layer latency, and each variant's attention and layer speed-ups.

    Only where both scopes ran (ok rows of the primary input distribution); [] otherwise.
    """
    inputs = analysis.primary_inputs(frame)
    ok = frame[(frame[COL.status] == "ok") & (frame[COL.inputs] == inputs)] if len(frame) else frame
    if not len(ok) or set(ok[COL.scope]) < {"attention", "layer"}:
        return []
    blocks: list[Block] = []
    for key, setting in ok.groupby(list(BLOCK_KEYS), dropna=False, sort=True):
        if set(setting[COL.scope]) < {"attention", "layer"}:
            continue
        table = _share_table(setting)
        if table is not None:
            title = analysis.setting_title(dict(zip(BLOCK_KEYS, key)))
            blocks += [Heading(3, title), table]
    if not blocks:
        return []
    intro = Paragraph(
        "A layer cell times a pre-norm transformer block (RMSNorm, Q/K/V projections, the attention, the output "
        "projection, a SwiGLU MLP of ~2.7x width, residuals). **attention share** is dense attention's latency over the "
        f"dense block's at the same N; beside each variant, its speed-up of attention alone and of the whole layer (inputs: {inputs}), "
        "then the layer's error: the stack's output against the same stack in float64 with exact attention, in the "
        "run's metric. A series matched to a budget (name@budget) was searched on attention alone, so its layer error "
        "can exceed that budget. Layer cells are timed alone, not paired with dense: their speed-up is the ratio of "
        "the two medians, which a busy machine can bias (docs/timing.md)."
    )
    return [Heading(2, "Attention inside a layer"), intro] + blocks


def _share_table(setting: pd.DataFrame) -> Table | None:
    def at(scope: str) -> pd.DataFrame:
        return setting[setting[COL.scope] == scope]

    dense = {
        s: at(s)[analysis.baseline_rows(at(s))].groupby(COL.seq_len)[COL.latency_s].median()
        for s in ("attention", "layer")
    }
    lengths = sorted(set(dense["attention"].index) & set(dense["layer"].index))
    if not lengths:
        return None
    series = sorted(set(setting.loc[~analysis.baseline_rows(setting), COL.series]))
    speed = {s: at(s).groupby([COL.series, COL.seq_len])["dense_speedup"].median() for s in ("attention", "layer")}
    errors = at("layer").groupby([COL.series, COL.seq_len])["error"].median() if "error" in setting else pd.Series()
    headers = ["N", "dense attention", "dense layer", "attention share"] + [
        f"{name} (attention / layer; layer error)" for name in series
    ]
    rows = []
    for n in lengths:
        attention, layer = dense["attention"][n], dense["layer"][n]
        line = [format_n(n), format_seconds(attention), format_seconds(layer), f"{100 * attention / layer:.0f}%"]
        for name in series:
            error = errors.get((name, n), np.nan)
            line.append(
                f"{format_ratio(speed['attention'].get((name, n), np.nan))} / {format_ratio(speed['layer'].get((name, n), np.nan))}"
                f"; {format_number(error, '.2g')}"
            )
        rows.append(line)
    return Table(headers, rows)
