"""Numbers the report derives from the rows: ratios to dense, scaling exponents, crossovers, Pareto fronts (the recommendation: choice.py).

Pure functions over the DataFrame of harness.store.load_run (one row per cell). Nothing here is typed by
hand: every cell of the "which one should I use" tables comes from the rows.

Conventions (documented here once):
- A *setting* is what the variants compete in: device, dtype, mode, causal, batch, heads, head_dim.
- The dense baseline of a cell is the ok dense row of the same setting, inputs, seq_len and kv_len;
  among several dense rows (backends, configs) the one whose config asks for backend "auto" (what
  a user gets by default), else the fastest. A cell whose inputs have no dense row uses the dense
  row of another input distribution (dense latency and memory do not depend on the values).
- A cell's speed-up over dense (`dense_speedup`) is its row's paired `speedup` (timed in alternation with dense
  inside the cell, with a 95% interval speedup_low-speedup_high) where the row has one; rows without (older
  runs, the baseline itself, a baseline that failed) fall back to the unpaired ratio of latencies
  (`dense_latency_ratio`). The row's `speedup` keeps its one meaning: the paired median.
- A series is a (variant, config) pair, labelled as in harness.store.series_labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from harness.schema import BASELINE, describe, fields_of

SETTING_KEYS = fields_of("setting")  # what variants compete in: the Cell fields of role "setting"
CELL_KEYS = SETTING_KEYS + fields_of("inputs", "length")


# ---- ratios to dense ---------------------------------------------------------------------------
def with_dense_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of frame with dense_latency_s, dense_peak_memory_bytes, dense_latency_ratio (dense time / time, unpaired),
    dense_speedup (the row's paired `speedup` where it has one, else dense_latency_ratio: the one the report shows)
    and memory_ratio (memory / dense memory), NaN where no ok dense row exists (see module docstring). The row's own
    `speedup` stays what was measured: the paired median, or NaN."""
    out = frame.copy()
    for column in ("speedup", "speedup_low", "speedup_high", "noisy", "load_per_cpu"):
        if column not in out:
            out[column] = np.nan
    paired = pd.to_numeric(out["speedup"], errors="coerce")
    for column in (
        "dense_latency_s",
        "dense_peak_memory_bytes",
        "dense_latency_ratio",
        "dense_speedup",
        "memory_ratio",
    ):
        out[column] = np.nan
    out["dense_status"] = None
    if not len(out):
        return out
    dense = out[out["variant"] == BASELINE]
    exact: dict[tuple, pd.Series] = {}
    loose: dict[tuple, pd.Series] = {}
    status: dict[tuple, str] = {}
    for key, group in dense.groupby(list(CELL_KEYS), dropna=False, sort=False):
        ok = group[group["status"] == "ok"]
        if len(ok):
            exact[_key(key)] = _pick_baseline(ok)
        else:
            status[_key(key)] = str(group["status"].iloc[0])
    for key, group in dense[dense["status"] == "ok"].groupby(
        [k for k in CELL_KEYS if k != "inputs"], dropna=False, sort=False
    ):
        loose[_key(key)] = _pick_baseline(group)
    latencies, memories, statuses = [], [], []
    for _, row in out.iterrows():
        key = tuple(_norm(row[k]) for k in CELL_KEYS)
        base = exact.get(key)
        if base is None:
            base = loose.get(tuple(_norm(row[k]) for k in CELL_KEYS if k != "inputs"))
        latencies.append(base["latency_s"] if base is not None else np.nan)
        memories.append(base["peak_memory_bytes"] if base is not None else np.nan)
        statuses.append("ok" if base is not None else status.get(key))
    out["dense_latency_s"] = latencies
    out["dense_peak_memory_bytes"] = memories
    out["dense_status"] = statuses
    ok = out["status"] == "ok"
    out["dense_latency_ratio"] = np.where(ok, out["dense_latency_s"] / out["latency_s"], np.nan)
    out["dense_speedup"] = np.where(ok & paired.notna(), paired, out["dense_latency_ratio"])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = out["peak_memory_bytes"] / out["dense_peak_memory_bytes"].where(out["dense_peak_memory_bytes"] > 0)
    out["memory_ratio"] = np.where(ok, ratio, np.nan)
    return out


def _pick_baseline(ok: pd.DataFrame) -> pd.Series:
    auto = ok[[isinstance(c, dict) and c.get("backend", "auto") == "auto" for c in ok["config"]]]
    pool = auto if len(auto) else ok
    return pool.sort_values("latency_s", na_position="last").iloc[0]


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _key(key) -> tuple:
    return tuple(_norm(k) for k in (key if isinstance(key, tuple) else (key,)))


# ---- scaling exponent --------------------------------------------------------------------------
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

    Uses rows of one input distribution (`inputs`, default primary_inputs(frame)), and of each series only the lengths
    that ran ok below its first length without an ok row (`stopped_at`, its status `stopped_status`): a fit never
    spans a timeout or an OOM, whose neighbours were often measured under other conditions.
    """
    columns = list(SETTING_KEYS) + ["series", "time_exponent", "memory_exponent", "fit_from", "fit_to", "points"]
    columns += ["stopped_at", "stopped_status"]
    if not len(frame):
        return pd.DataFrame(columns=columns)
    inputs = inputs or primary_inputs(frame)
    rows = frame[frame["inputs"] == inputs]
    records = []
    for key, series in rows.groupby(list(SETTING_KEYS) + ["series"], dropna=False, sort=True):
        if not (series["status"] == "ok").any():
            continue
        stopped_at, stopped_status = _first_failure(series)
        ok = series[(series["status"] == "ok") & (series["seq_len"] < (stopped_at or math.inf))]
        group = ok.groupby("seq_len", as_index=False)[["latency_s", "peak_memory_bytes"]].median()
        lengths = sorted(group["seq_len"])[-last:]
        records.append(
            dict(
                zip(list(SETTING_KEYS) + ["series"], _key(key)),
                time_exponent=fit_exponent(group["seq_len"], group["latency_s"], last=last),
                memory_exponent=fit_exponent(group["seq_len"], group["peak_memory_bytes"], last=last),
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
    for n, at_n in series.sort_values("seq_len").groupby("seq_len", sort=True):
        if not (at_n["status"] == "ok").any():
            return int(n), str(at_n["status"].iloc[0])
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
    columns = list(SETTING_KEYS) + ["series", "kind", "length", "longest", "dense_oom_from"]
    inputs = inputs or primary_inputs(frame)
    rows = frame[(frame["inputs"] == inputs) & (frame["variant"] != BASELINE)] if len(frame) else frame
    records = []
    for key, group in rows.groupby(list(SETTING_KEYS) + ["series"], dropna=False, sort=True):
        ok = (
            group[group["status"] == "ok"].groupby("seq_len", as_index=False)[["latency_s", "dense_latency_s"]].median()
        )
        result = crossover_length(ok["seq_len"], ok["latency_s"], ok["dense_latency_s"])
        oom = group[(group["dense_status"] == "oom")]["seq_len"]
        records.append(
            dict(
                zip(list(SETTING_KEYS) + ["series"], _key(key)),
                kind=result.kind,
                length=result.length,
                longest=result.longest,
                dense_oom_from=int(oom.min()) if len(oom) else None,
            )
        )
    return pd.DataFrame(records, columns=columns)


# ---- Pareto front ------------------------------------------------------------
def pareto_front(points: pd.DataFrame, x: str, y: str, *, same_below: float = 0.0) -> pd.DataFrame:
    """The rows not dominated in (x, y), both minimised, sorted by x. Rows with a missing x or y are left out.

    `same_below`: y values at or below it count as equal (the rounding floor of exact attention: an exact variant
    with a rounding error a little below dense's and twice its latency is not a trade-off)."""
    points = points[np.isfinite(points[x].astype(float)) & np.isfinite(points[y].astype(float))]
    points = points.sort_values([x, y])
    keep, best = [], math.inf
    for index, value in zip(points.index, points[y].clip(lower=same_below)):
        if value < best:
            keep.append(index)
            best = value
    return points.loc[keep]


# ---- helpers shared with the report --------------------------------------------------------------
def primary_inputs(frame: pd.DataFrame) -> str | None:
    """The input distribution the latency, memory and Pareto figures use: the one where the most series ran ok (with
    error budgets, approximate variants often meet a budget on structured inputs only); ties: "gaussian", then by name."""
    if not len(frame):
        return None
    names = sorted({str(v) for v in frame["inputs"]})
    ok = frame[frame["status"] == "ok"]
    counts = {name: ok.loc[ok["inputs"] == name, "series"].nunique() if "series" in ok else 0 for name in names}
    return max(names, key=lambda name: (counts[name], name == "gaussian", [-ord(c) for c in name]))


def settings(frame: pd.DataFrame) -> list[dict]:
    """The distinct settings of a frame, sorted, as dicts."""
    if not len(frame):
        return []
    keys = frame[list(SETTING_KEYS)].astype(str).drop_duplicates().index
    found = [dict(zip(SETTING_KEYS, (_norm(frame.at[i, k]) for k in SETTING_KEYS))) for i in keys]
    return sorted(found, key=lambda s: tuple(str(s[k]) for k in SETTING_KEYS))


def select(frame: pd.DataFrame, setting: dict) -> pd.DataFrame:
    """The rows of one setting."""
    mask = np.ones(len(frame), dtype=bool)
    for k, v in setting.items():
        mask &= np.array([_norm(x) == v for x in frame[k]], dtype=bool)
    return frame[mask]


def setting_title(setting: dict) -> str:
    """A short readable name of a setting: 'float32 forward, non-causal, B=1 H=8 D=64 H_kv=2 decode (cpu)'."""
    text = dict(zip(SETTING_KEYS, describe(setting, SETTING_KEYS, skip_defaults=False)))
    shape = " ".join(text[k] for k in ("batch", "heads", "head_dim") if setting.get(k) is not None)
    return f"{text['dtype']} {text['mode']}, {text['causal']}, {shape}{axes_title(setting)} ({setting.get('device')})"


def axes_title(setting: dict) -> str:
    """The setting's axes beyond dtype, mode, causal and shape, where they differ from the default: ' decode H_kv=2 pad=0.25'."""
    axes = [k for k in SETTING_KEYS if k not in ("device", "batch", "heads", "head_dim", "dtype", "mode", "causal")]
    return "".join(" " + p for p in describe(setting, axes))


def possible(frame: pd.DataFrame) -> pd.Series:
    """Rows not flagged impossible (a number above the machine's measured limits: harness.measure.roofline); an
    impossible row is shown, never a winner."""
    if "impossible" not in frame:
        return pd.Series(True, index=frame.index)
    return frame["impossible"].isna()


def _ok(frame: pd.DataFrame, inputs: str | None) -> pd.DataFrame:
    if not len(frame):
        return frame
    inputs = inputs or primary_inputs(frame)
    return frame[(frame["status"] == "ok") & (frame["inputs"] == inputs)]
