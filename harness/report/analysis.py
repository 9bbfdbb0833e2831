"""Numbers the report derives from the rows: settings, ratios to dense, error budgets, Pareto fronts (scaling: scaling.py;
the recommendation: choice.py).

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
- A run's budgets and metric are its spec.toml's `error_budgets` and `error_metric`; a run without
  budgets (older runs, or none asked for) is answered for DEFAULT_BUDGETS in relative L2 error.
- A row's error is its relative L2 error, or 1 - cosine similarity for the cosine metric.
- A row is a candidate at budget b when its error on the evaluation seed is at most b, or when it was
  matched to b (searched on calibration seeds) and its error is at most b * (1 + GENERALISATION_MARGIN):
  the search scores other tensors than the evaluation's, so a tuned config may land a little above.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from harness.entries import searched_fields
from harness.error_metrics import METRIC_NAMES, metric_error
from harness.schema import BASELINE, NOT_RUN_PREFIX, describe, fields_of
from harness.store import COL

SETTING_KEYS = fields_of("setting")  # what variants compete in: the Cell fields of role "setting"
CELL_KEYS = SETTING_KEYS + fields_of("inputs", "length")
DEFAULT_BUDGETS = (1e-2, 1e-1)  # relative L2 error budgets for a run that asked for none: near-exact and approximate
GENERALISATION_MARGIN = 0.1  # a matched row may exceed its budget by 10% on the evaluation seed (see the module doc)


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
    paired = pd.to_numeric(out[COL.speedup], errors="coerce")
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
    dense = out[baseline_rows(out)]
    exact: dict[tuple, pd.Series] = {}
    loose: dict[tuple, pd.Series] = {}
    status: dict[tuple, str] = {}
    for key, group in dense.groupby(list(CELL_KEYS), dropna=False, sort=False):
        ok = group[group[COL.status] == "ok"]
        if len(ok):
            exact[group_key(key)] = _pick_baseline(ok)
        else:
            status[group_key(key)] = str(group[COL.status].iloc[0])
    for key, group in dense[dense[COL.status] == "ok"].groupby(
        [k for k in CELL_KEYS if k != "inputs"], dropna=False, sort=False
    ):
        loose[group_key(key)] = _pick_baseline(group)
    latencies, memories, statuses = [], [], []
    for _, row in out.iterrows():
        key = tuple(_norm(row[k]) for k in CELL_KEYS)
        base = exact.get(key)
        if base is None:
            base = loose.get(tuple(_norm(row[k]) for k in CELL_KEYS if k != "inputs"))
        latencies.append(base[COL.latency_s] if base is not None else np.nan)
        memories.append(base[COL.peak_memory_bytes] if base is not None else np.nan)
        statuses.append("ok" if base is not None else status.get(key))
    out["dense_latency_s"] = latencies
    out["dense_peak_memory_bytes"] = memories
    out["dense_status"] = statuses
    ok = out[COL.status] == "ok"
    out["dense_latency_ratio"] = np.where(ok, out["dense_latency_s"] / out[COL.latency_s], np.nan)
    out["dense_speedup"] = np.where(ok & paired.notna(), paired, out["dense_latency_ratio"])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = out[COL.peak_memory_bytes] / out["dense_peak_memory_bytes"].where(out["dense_peak_memory_bytes"] > 0)
    out["memory_ratio"] = np.where(ok, ratio, np.nan)
    return out


def _pick_baseline(ok: pd.DataFrame) -> pd.Series:
    auto = ok[auto_backend(ok)]
    pool = auto if len(auto) else ok
    return pool.sort_values(COL.latency_s, na_position="last").iloc[0]


def auto_backend(rows: pd.DataFrame) -> np.ndarray:
    """Which rows' config asks for backend "auto" (what a user gets by default; the dense baseline among several)."""
    return np.array([isinstance(c, dict) and c.get("backend", "auto") == "auto" for c in rows[COL.config]], dtype=bool)


def is_baseline_series(label) -> bool:
    """Whether a series label is the dense baseline's: 'dense' or 'dense(backend=math)', not 'dense[kv=int8]' (a
    series field away from its default: harness.schema.series_suffix)."""
    return label == BASELINE or (str(label).startswith(BASELINE + "(") and "[" not in str(label))


def baseline_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows are the dense baseline's (is_baseline_series of their series label)."""
    return frame[COL.series].map(is_baseline_series).astype(bool)


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def group_key(key) -> tuple:
    return tuple(_norm(k) for k in (key if isinstance(key, tuple) else (key,)))


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
    names = sorted({str(v) for v in frame[COL.inputs]})
    ok = frame[frame[COL.status] == "ok"]
    counts = {name: ok.loc[ok[COL.inputs] == name, COL.series].nunique() if COL.series in ok else 0 for name in names}
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


def searched_extras(r: pd.Series) -> list[str]:
    """The fields a variant's search tries beside its quality knob, where the row's config sets them: ['sinks=4']."""
    config = r[COL.config] if isinstance(r[COL.config], dict) else {}
    return [f"{f}={config[f]}" for f in searched_fields(str(r[COL.variant]))[1:] if config.get(f)]


def not_run_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows are cells not run because a shorter N of their series failed (their reason says so)."""
    return frame[COL.reason].fillna("").astype(str).str.startswith(NOT_RUN_PREFIX)


def possible(frame: pd.DataFrame) -> pd.Series:
    """Rows not flagged impossible (a number above the machine's measured limits: harness.measure.roofline); an
    impossible row is shown, never a winner."""
    if COL.impossible not in frame:
        return pd.Series(True, index=frame.index)
    return frame[COL.impossible].isna()


# ---- error budgets -----------------------------------------------------------------------------------
def run_budgets(spec: dict) -> tuple[tuple[float, ...], str]:
    """(the budgets, the metric) a run answers for, from its spec.toml's values (DEFAULT_BUDGETS, rel_l2 when it has none)."""
    metric = spec.get("error_metric") if spec.get("error_metric") in METRIC_NAMES else "rel_l2"
    raw = spec.get("error_budgets") or []
    budgets = tuple(
        sorted({float(b) for b in raw if isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0})
    )
    return (budgets, metric) if budgets else (DEFAULT_BUDGETS, "rel_l2")


def within(frame: pd.DataFrame, budget: float, metric: str) -> pd.Series:
    """True for the rows that are candidates at `budget` (see the module doc); False where the error is missing."""
    error = metric_error(frame, metric)
    matched = pd.to_numeric(frame[COL.matched_budget], errors="coerce") if COL.matched_budget in frame else np.nan
    tuned_here = np.isclose(matched, budget) if not isinstance(matched, float) else False
    return (error <= budget) | (tuned_here & (error <= budget * (1 + GENERALISATION_MARGIN)))


def with_budgets(frame: pd.DataFrame, budgets: Sequence[float], metric: str) -> pd.DataFrame:
    """A copy of frame with "error" (in the metric) and "in_budget" (a candidate at the largest budget)."""
    out = frame.copy()
    out["error"] = metric_error(out, metric) if len(out) else pd.Series(dtype=float)
    out["in_budget"] = within(out, max(budgets), metric) if len(out) else pd.Series(dtype=bool)
    return out


def budget_text(budget: float, metric: str) -> str:
    """'0.05' for relative L2; '1-cos 0.05' for cosine."""
    value = f"{budget:g}" if math.isfinite(budget) else "-"
    return value if metric == "rel_l2" else f"1-cos {value}"
