"""Which one should I use: the fastest series within each error budget per N, trusting only what the intervals show.

Pure numbers over a frame with dense ratios (harness.report.analysis.with_dense_ratios); the
conventions (settings, the dense baseline, paired speed-ups) are analysis.py's.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from harness.report.analysis import BASELINE, DEFAULT_BUDGETS, SETTING_KEYS, _key, select, setting_title


def recommend(frame: pd.DataFrame, budgets: Iterable[float] = DEFAULT_BUDGETS) -> list[str]:
    """One short paragraph per setting and error budget: the fastest series within the budget, per N range.

    A series is within budget at N when its relative L2 error is at most the budget on every input
    distribution measured there (a missing error disqualifies it); its speed-up (and interval) and
    time are the medians over the distributions. Series rank by speed-up over dense (by latency where
    one has none). A variant beats dense only when its paired interval lies above 1 (speedup_low > 1),
    else dense is named with the variant as a tie; a winner whose interval overlaps the runner-up's
    (p20-p80 latency ranges for rows without an interval) is called a tie too. `frame` must carry
    dense ratios (with_dense_ratios).
    """
    paragraphs = []
    ok = frame[frame["status"] == "ok"] if len(frame) else frame
    for key, setting in ok.groupby(list(SETTING_KEYS), dropna=False, sort=True):
        title = setting_title(dict(zip(SETTING_KEYS, _key(key))))
        has_dense = bool((select(frame, dict(zip(SETTING_KEYS, _key(key))))["variant"] == BASELINE).any())  # failed rows too
        per = setting.groupby(["series", "seq_len"]).agg(
            error=("rel_l2_error", lambda e: e.max() if e.notna().all() else np.nan),
            latency=("latency_s", "median"),
            p20=("latency_p20_s", "median"),
            p80=("latency_p80_s", "median"),
            speedup=("speedup", "median"),
            low=("speedup_low", "median"),
            high=("speedup_high", "median"),
        ).reset_index()
        for budget in budgets:
            spans: list[list] = []  # [winner, [(N, speed-up, the series it ties with or None), ...]]
            for n, at_n in per.groupby("seq_len", sort=True):
                winner, speedup, tie = _pick(at_n[at_n["error"] <= budget])
                point = (int(n), speedup, tie)
                if spans and spans[-1][0] == winner:
                    spans[-1][1].append(point)
                else:
                    spans.append([winner, [point]])
            parts = [_span_text(winner, points, has_dense=has_dense) for winner, points in spans]
            paragraphs.append(f"{title}, error budget {budget:g}: " + "; ".join(parts) + ".")
    return paragraphs


def _pick(fit: pd.DataFrame) -> tuple[str | None, float, str | None]:
    """(winner, its speed-up, the series it ties with) among the series within budget at one N (see recommend)."""
    if not len(fit):
        return None, float("nan"), None
    fit = fit.sort_values("speedup", ascending=False) if fit["speedup"].notna().all() else fit.sort_values("latency")
    first = fit.iloc[0]
    dense = fit[fit["series"] == BASELINE]
    first_interval = _interval(first)
    if first["series"] != BASELINE and len(dense) and first_interval and first_interval[0] <= 1:
        return BASELINE, float(dense["speedup"].iloc[0]), str(first["series"])  # not shown to beat dense
    if len(fit) < 2:
        return str(first["series"]), float(first["speedup"]), None
    second = fit.iloc[1]
    second_interval = _interval(second)
    if first_interval and second_interval:
        tied = first_interval[0] <= second_interval[1]
    else:
        tied = first["p80"] >= second["p20"]  # their p20-p80 latency ranges overlap
    return str(first["series"]), float(first["speedup"]), str(second["series"]) if tied else None


def _interval(r: pd.Series) -> tuple[float, float] | None:
    """A series' paired speed-up interval; the dense baseline's is exactly 1 (it is the reference)."""
    if np.isfinite(r["low"]) and np.isfinite(r["high"]):
        return float(r["low"]), float(r["high"])
    if r["series"] == BASELINE and r["speedup"] == 1:
        return 1.0, 1.0
    return None


def _span_text(winner: str | None, points: list[tuple[int, float, str | None]], *, has_dense: bool = True) -> str:
    first, last = points[0][0], points[-1][0]
    where = f"N={first}" if first == last else f"N={first}-{last}"
    if winner is None:
        return f"{where}: none within budget ran"
    ties = [f"{t} at N={n}" for n, _, t in points if t]
    tie_note = "a tie: within the timing spread of " + ", ".join(ties) if ties else ""
    if winner == BASELINE:
        return f"{where}: **{winner}**" + (f" ({tie_note})" if tie_note else "")
    notes = []
    measured = [(n, s) for n, s, _ in points if np.isfinite(s)]
    if measured:
        (n0, s0), (n1, s1) = measured[0], measured[-1]
        notes.append(f"speed-up over dense {s0:.3g}x at N={n0}" + (f" to {s1:.3g}x at N={n1}" if n1 != n0 else ""))
    missing = [n for n, s, _ in points if not np.isfinite(s)]
    if missing and has_dense:
        notes.append("dense did not run at N=" + ",".join(map(str, missing)))
    if tie_note:
        notes.append(tie_note)
    return f"{where}: **{winner}**" + (" (" + "; ".join(notes) + ")" if notes else "")
