"""The figures against N: a measured column per series (latency, memory, speed-up, the decode figures) and the error
(harness.report.figures declares them; shared styles and axes in harness.report.plotting).

Log-log axes; OOM (x) and timeouts (|) are marked at the top of the axes (mark_failures). Each function writes one
PNG and returns its path, or None when there is nothing to draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from harness.error_metrics import METRIC_NAMES
from harness.report import plotting
from harness.report.analysis import primary_inputs, select, setting_title
from harness.store import COL

MIN_ERROR = 1e-12  # errors are drawn on log axes: an exact 0 is drawn here


def plot_metric_vs_n(
    frame: pd.DataFrame,
    metric: str,
    path: Path,
    *,
    ylabel: str,
    title: str,
    logy: bool = True,
    hline: float | None = None,
    bytes_axis: bool = False,
    ratio_axis: bool = False,
    seconds_axis: bool = False,
    band: tuple[str, str] | None = None,
) -> Path | None:
    """One subplot per setting: `metric` of every series against N, one input distribution, OOM and timeouts marked.

    `band` (low, high columns, e.g. the p20 and p80 latency) shades the spread around each median line where both are
    measured. A series outside every error budget (plotting.outside_budget) is drawn faded and labelled so.
    """
    inputs = primary_inputs(frame)
    rows = frame[frame[COL.inputs] == inputs] if len(frame) else frame
    if not len(rows) or not rows[metric].notna().any():
        return None
    found = plotting.with_data(rows, metric)
    plt, fig, axes = plotting.grid(len(found))
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(rows))
    for ax, setting in zip(axes, found):
        part = select(rows, setting)
        drawn = set()
        for label, group in part.groupby(COL.series, sort=True):
            if _series_vs_n(ax, group, metric, styles, label, band):
                drawn.add(str(label))
            mark_failures(ax, group, styles[label])
        if hline is not None:
            ax.axhline(hline, color="gray", linewidth=0.8, linestyle="--")
        plotting.log_n_axis(ax, part)
        if logy:
            plotting.log_axis(ax.yaxis, ax.set_yscale)
        if bytes_axis:
            plotting.bytes_axis(ax)
        if ratio_axis:
            plotting.ratio_axis(ax)
        if seconds_axis:
            plotting.seconds_axis(ax.yaxis)
        note = missing_note(part, drawn)
        ax.set_title(setting_title(setting) + (f"\n{note}" if note else ""), fontsize=9 if not note else 8)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, f"{title} (inputs: {inputs})", path)
    return path


def _series_vs_n(ax, group: pd.DataFrame, metric: str, styles: dict, label, band: tuple[str, str] | None) -> bool:
    """One series' median `metric` per N on `ax` (its knob values beside the points where they differ, its band, hollow
    markers where timed noisily); False when it has no ok value to draw."""
    ok_rows = group[(group[COL.status] == "ok") & group[metric].notna()]
    ok = ok_rows.groupby(COL.seq_len)[metric].median()
    if not len(ok):
        return False
    knobs = knob_labels(ok_rows)
    if knobs:  # a matched series whose knob differs per N is several configs: points with their knob
        styles[label] = dict(styles[label], linestyle="none")  # its legend entry too
    ax.plot(ok.index, ok.values, **styles[label], linewidth=1.6, markersize=5 if knobs else 4)
    for n, text in knobs.items():
        ax.annotate(
            text,
            (n, ok.loc[n]),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=6,
            color=styles[label]["color"],
        )
    if band is not None and not knobs:  # no band joining different configs either
        _band(ax, ok_rows, band, styles[label])
    noisy = group[(group[COL.noisy] == True) & group[COL.seq_len].isin(ok.index)][COL.seq_len].unique()  # noqa: E712
    if len(noisy):  # hollow markers: timed under load or noisily (docs/timing.md)
        ax.plot(
            noisy,
            ok.loc[noisy].values,
            linestyle="none",
            marker=styles[label].get("marker", "o"),
            markersize=8,
            markerfacecolor="white",
            markeredgecolor=styles[label].get("color"),
            zorder=3,
        )
    return True


def _band(ax, ok_rows: pd.DataFrame, band: tuple[str, str], style: dict) -> None:
    """Shade between the `band` columns (medians per N) where both are measured."""
    spread = ok_rows.dropna(subset=list(band)).groupby(COL.seq_len)[list(band)].median()
    if len(spread):
        ax.fill_between(
            spread.index,
            spread[band[0]],
            spread[band[1]],
            color=style["color"],
            linewidth=0,
            alpha=plotting.BAND_ALPHA * style.get("alpha", 1.0),
        )


def knob_labels(ok_rows: pd.DataFrame) -> dict[int, str]:
    """N -> 'window=16' for the ok rows of a series matched to a budget whose searched knob took more than one value
    across N (so its points are different configs, never one line); {} otherwise."""
    values: dict[int, str] = {}
    for _, r in ok_rows.iterrows():
        tuning, config = r.get(COL.tuning), r.get(COL.config)
        if isinstance(tuning, dict) and isinstance(config, dict) and tuning.get("knob") in config:
            values[int(r[COL.seq_len])] = f"{tuning['knob']}={config[tuning['knob']]}"
    return values if len(set(values.values())) > 1 else {}


def search_best(group: pd.DataFrame) -> pd.Series:
    """Per N, the lowest finite error the budget search of the series' unreachable rows scored (its `tuning.tried`,
    on the search's own seeds): what the error figure draws for a series that met no budget there."""
    best = {}
    for _, r in group[group[COL.status] == "unreachable"].iterrows():
        tuning = r.get(COL.tuning)
        tried = tuning.get("tried") if isinstance(tuning, dict) else None
        errors = [float(e) for e in (tried or {}).values() if isinstance(e, (int, float)) and np.isfinite(e)]
        if errors:
            best[int(r[COL.seq_len])] = min(errors + [best.get(int(r[COL.seq_len]), np.inf)])
    return pd.Series(best, dtype=float).sort_index()


def plot_error_vs_n(
    frame: pd.DataFrame, path: Path, *, budgets: Sequence[float], metric: str, against: str = "exact float64 attention"
) -> Path | None:
    """The error metric (frame's "error", harness.report.analysis.with_budgets) against N: a row of subplots per setting, one column
    per input distribution; each error budget a dashed line. `against`: what the errors are measured against."""
    if not len(frame) or not frame["error"].notna().any():
        return None
    found = plotting.with_data(frame, "error")
    dists = sorted({str(v) for v in frame[COL.inputs]})
    plt, fig, axes = plotting.grid(len(found) * len(dists), ncols=len(dists))
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(frame))
    for i, setting in enumerate(found):
        part = select(frame, setting)
        for j, dist in enumerate(dists):
            ax = axes[i * len(dists) + j]
            sub = part[part[COL.inputs] == dist]
            for label, group in sub.groupby(COL.series, sort=True):
                ok = group[(group[COL.status] == "ok") & group["error"].notna()].groupby(COL.seq_len)["error"].median()
                if len(ok):
                    ax.plot(ok.index, np.maximum(ok.values, MIN_ERROR), **styles[label], linewidth=1.6, markersize=4)
                best = search_best(group)
                if len(best):  # a budget no knob value met: still drawn, at the best error its search scored
                    ax.plot(
                        best.index,
                        np.maximum(best.values, MIN_ERROR),
                        color=styles[label]["color"],
                        marker=styles[label]["marker"],
                        markerfacecolor="white",
                        linestyle=":",
                        linewidth=1.0,
                        markersize=5,
                        label="_" + str(label) if len(ok) else styles[label]["label"],
                        gid=plotting.SEARCH_GID,
                    )
                mark_failures(ax, group, styles[label])
            if ax.has_data():
                plotting.budget_lines(ax, budgets, metric)
            plotting.log_n_axis(ax, part)
            plotting.log_axis(ax.yaxis, ax.set_yscale)
            ax.set_title(f"inputs: {dist}\n{setting_title(setting)}", fontsize=8)
            ax.set_ylabel(METRIC_NAMES[metric])
            ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, f"Error against {against.split(' (')[0]} (dashed: the error budgets)", path)
    return path


def mark_failures(ax, group: pd.DataFrame, style: dict) -> None:
    """Marks at the top of the axes at each N where the series ran out of memory (x) or timed out (|)."""
    for status, (gid, marker, _) in plotting.FAILURE_MARKS.items():
        at = sorted(set(group[group[COL.status] == status][COL.seq_len]))
        if at:
            ax.plot(
                at,
                [0.96] * len(at),
                transform=ax.get_xaxis_transform(),
                linestyle="none",
                marker=marker,
                color=style["color"],
                markersize=8 if marker == "x" else 11,
                markeredgewidth=2,
                clip_on=False,
                gid=gid,
            )


def missing_note(part: pd.DataFrame, drawn: set[str]) -> str:
    """'no point: dense (timeout), linformer@0.1 (unsupported)': the series of a panel's rows with nothing drawn, and
    the status of their rows, so a series absent from a panel says why ('' when every series is drawn)."""
    missing = []
    for label, group in part.groupby(COL.series, sort=True):
        if str(label) not in drawn:
            statuses = sorted({str(v) for v in group[COL.status]})
            missing.append(f"{label} ({', '.join(statuses)})")
    return plotting.wrap("no point: " + "; ".join(missing), 70) if missing else ""
