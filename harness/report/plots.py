"""The report's figures, one function per PNG (shared styles and axes in harness.report.plotting).

Log-log axes where scaling matters; OOM points are drawn as crosses at the top of the axes.
Each function writes one PNG with a stable file name and returns its path, or None when there
is nothing to draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from harness.report.analysis import pareto_front, primary_inputs, select, setting_title, settings
from harness.report.budgets import METRIC_NAMES
from harness.report.formatting import format_n
from harness.report import plotting
from harness.schema import BASELINE

LIMIT_STATUSES = ("oom", "timeout")  # the failures that make a length limit worth a figure
PARETO_COLUMNS = 3  # panels (lengths) per line of the Pareto figure; a setting with more lengths takes several lines
MIN_ERROR = 1e-12  # errors are drawn on log axes: an exact 0 is drawn here
FRONT_GID, OUTSIDE_GID = "pareto-front", "outside-budget"  # gids of the Pareto points (the tests find them by these)


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
    """One subplot per setting: `metric` of every series against N, one input distribution, OOM marked.

    `band` (low, high columns, e.g. the p20 and p80 latency) shades the spread around each median line where both are
    measured. A series outside every error budget (plotting.outside_budget) is drawn faded and labelled so.
    """
    inputs = primary_inputs(frame)
    rows = frame[frame["inputs"] == inputs] if len(frame) else frame
    if not len(rows) or not rows[metric].notna().any():
        return None
    found = plotting.with_data(rows, metric)
    plt, fig, axes = plotting.grid(len(found))
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(rows))
    for ax, setting in zip(axes, found):
        part = select(rows, setting)
        for label, group in part.groupby("series", sort=True):
            ok_rows = group[(group["status"] == "ok") & group[metric].notna()]
            ok = ok_rows.groupby("seq_len")[metric].median()
            if len(ok):
                ax.plot(ok.index, ok.values, **styles[label], linewidth=1.6, markersize=4)
                if band is not None:
                    _band(ax, ok_rows, band, styles[label])
                noisy = group[(group["noisy"] == True) & group["seq_len"].isin(ok.index)]["seq_len"].unique()  # noqa: E712
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
            plotting.mark_oom(ax, group, styles[label])
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
        ax.set_title(setting_title(setting), fontsize=9)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, f"{title} (inputs: {inputs})", path)
    return path


def _band(ax, ok_rows: pd.DataFrame, band: tuple[str, str], style: dict) -> None:
    """Shade between the `band` columns (medians per N) where both are measured."""
    spread = ok_rows.dropna(subset=list(band)).groupby("seq_len")[list(band)].median()
    if len(spread):
        ax.fill_between(
            spread.index,
            spread[band[0]],
            spread[band[1]],
            color=style["color"],
            linewidth=0,
            alpha=plotting.BAND_ALPHA * style.get("alpha", 1.0),
        )


def plot_error_vs_n(
    frame: pd.DataFrame, path: Path, *, budgets: Sequence[float], metric: str, against: str = "exact float64 attention"
) -> Path | None:
    """The error metric (frame's "error", harness.report.budgets) against N: a row of subplots per setting, one column
    per input distribution; each error budget a dashed line. `against`: what the errors are measured against."""
    if not len(frame) or not frame["error"].notna().any():
        return None
    found = plotting.with_data(frame, "error")
    dists = sorted({str(v) for v in frame["inputs"]})
    plt, fig, axes = plotting.grid(len(found) * len(dists), ncols=len(dists))
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(frame))
    for i, setting in enumerate(found):
        part = select(frame, setting)
        for j, dist in enumerate(dists):
            ax = axes[i * len(dists) + j]
            sub = part[part["inputs"] == dist]
            for label, group in sub.groupby("series", sort=True):
                ok = group[(group["status"] == "ok") & group["error"].notna()].groupby("seq_len")["error"].median()
                if len(ok):
                    ax.plot(ok.index, np.maximum(ok.values, MIN_ERROR), **styles[label], linewidth=1.6, markersize=4)
                plotting.mark_oom(ax, group, styles[label])
            if ax.has_data():
                plotting.budget_lines(ax, budgets, metric)
            plotting.log_n_axis(ax, part)
            plotting.log_axis(ax.yaxis, ax.set_yscale)
            ax.set_title(f"inputs: {dist}\n{setting_title(setting)}", fontsize=8)
            ax.set_ylabel(METRIC_NAMES[metric])
            ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, f"Error against {against.split(' (')[0]} (dashed: the error budgets)", path)
    return path


def plot_pareto(frame: pd.DataFrame, path: Path, *, budgets: Sequence[float], metric: str) -> Path | None:
    """Error (the run's metric) against latency on the primary inputs: a row of panels per setting, one panel per N.

    Filled: within the largest budget; the Pareto front (outlined, joined) is computed over those only. Hollow:
    outside every budget, drawn but never on the front. Each budget is a dashed line.
    """
    inputs = primary_inputs(frame)
    ok = (
        frame[
            (frame["status"] == "ok")
            & (frame["inputs"] == inputs)
            & frame["error"].notna()
            & frame["latency_s"].notna()
        ]
        if len(frame)
        else frame
    )
    if not len(ok):
        return None
    blocks = [(setting, sorted(set(select(ok, setting)["seq_len"]))) for setting in settings(ok)]
    ncols = min(PARETO_COLUMNS, max(len(lengths) for _, lengths in blocks))
    lines = [(setting, lengths[k : k + ncols]) for setting, lengths in blocks for k in range(0, len(lengths), ncols)]
    plt, fig, axes = plotting.grid(len(lines) * ncols, ncols=ncols, width=3.6, height=3.0)
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(ok))
    shared: dict[int, list] = {}  # a setting's panels share one error range
    for i, (setting, lengths) in enumerate(lines):
        part = select(ok, setting)
        for j, (ax, n) in enumerate(zip(axes[i * ncols : i * ncols + len(lengths)], lengths)):
            _pareto_panel(ax, part[part["seq_len"] == n], styles, budgets, metric)
            first = n == min(part["seq_len"])
            ax.set_title(
                f"{setting_title(setting)}\nN = {format_n(n)}" if first else f"N = {format_n(n)}",
                fontsize=8,
                loc="left" if first else "center",
            )
            ax.set_xlabel(f"latency (inputs: {inputs})", fontsize=8)
            if j == 0:
                ax.set_ylabel(METRIC_NAMES[metric], fontsize=8)
            shared.setdefault(id(setting), [part["error"]]).append(ax)
    for errors, *panels in shared.values():
        _share_y(panels, errors, budgets)
    plotting.finish(
        plt,
        fig,
        axes,
        styles,
        "Error vs latency at each N, better is lower-left\nfilled: within the largest budget; "
        "outlined: the Pareto front among them; hollow: outside every budget; dashed: the budgets",
        path,
    )
    return path


def _pareto_panel(ax, at_n: pd.DataFrame, styles: dict, budgets: tuple[float, ...], metric: str) -> None:
    """One N's points (a series' median latency and error), the front over the in-budget ones, the budget lines."""
    points = (
        at_n.groupby("series")
        .agg(latency=("latency_s", "median"), error=("error", "median"), in_budget=("in_budget", "all"))
        .reset_index()
    )
    points["error"] = points["error"].clip(lower=MIN_ERROR)
    front = pareto_front(
        points[points["in_budget"].astype(bool)], "latency", "error", same_below=rounding_floor(points)
    )
    if len(front) > 1:
        ax.step(
            front["latency"],
            front["error"],
            where="post",
            color="gray",
            linewidth=1,
            alpha=0.7,
            label="_front",
            gid=FRONT_GID,
        )
    on_front = set(front["series"])
    for _, p in points.iterrows():
        style = styles[p["series"]]
        if p["in_budget"]:
            big = p["series"] in on_front
            ax.scatter(
                p["latency"],
                p["error"],
                color=style["color"],
                marker=style["marker"],
                s=70 if big else 35,
                edgecolors="black" if big else "none",
                zorder=3,
                label=style["label"],
                gid=FRONT_GID if big else None,
            )
        else:
            ax.scatter(
                p["latency"],
                p["error"],
                facecolors="none",
                edgecolors=style["color"],
                marker=style["marker"],
                s=40,
                linewidths=1.2,
                zorder=3,
                label=style["label"],
                gid=OUTSIDE_GID,
            )
    plotting.budget_lines(ax, budgets, metric)
    plotting.log_axis(ax.xaxis, ax.set_xscale)
    plotting.seconds_axis(ax.xaxis)
    ax.tick_params(labelsize=7)
    ax.margins(x=0.15)  # room for the markers and the budget labels at the edges
    plotting.few_log_ticks(ax.xaxis, ax.get_xlim())
    ax.grid(True, which="major", alpha=0.3)


ROUNDING_FACTOR = 4.0  # errors within this factor of dense's own (its rounding error) count as exact


def rounding_floor(points: pd.DataFrame) -> float:
    """The error at or below which a point counts as exact as dense: ROUNDING_FACTOR x dense's error at this N
    (0 where dense has no point: every difference then counts)."""
    dense = points[points["series"].map(lambda s: s == BASELINE or str(s).startswith(BASELINE + "("))]["error"]
    return float(dense.min()) * ROUNDING_FACTOR if len(dense) and np.isfinite(dense.min()) else 0.0


def _share_y(axes, errors: pd.Series, budgets: tuple[float, ...]) -> None:
    """One log error range for a row of panels (its points and budgets), so the panels of one setting line up."""
    values = [float(e) for e in errors.clip(lower=MIN_ERROR)] + list(budgets)
    for ax in axes:
        plotting.log_axis(ax.yaxis, ax.set_yscale)
        ax.set_ylim(min(values) / 3, max(values) * 3)


def plot_memory_limits(limits: pd.DataFrame, frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: a bar per series to the longest N that ran, annotated with what stopped it (or none).

    None (no file) unless some cell ran out of memory or timed out: without a limit hit, every bar would read "ran every N tried".
    """
    if not frame["status"].isin(LIMIT_STATUSES).any() or not len(limits):
        return None
    # a panel where something ran ok or hit a limit (one of only unsupported cells says nothing about length)
    drawn = limits.assign(
        drawn=limits["longest_ok"].where(
            limits["longest_ok"].notna(), limits["failed_status"].where(limits["failed_status"].isin(LIMIT_STATUSES))
        )
    )
    found = plotting.with_data(drawn, "drawn")
    plt, fig, axes = plotting.grid(len(found), height=0.35 * limits["series"].nunique() + 1.2)
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(limits, setting).sort_values("series", ascending=False)
        y = np.arange(len(part))
        left, right = max_length_axis(part)
        longest = part["longest_ok"].astype(float).fillna(0)
        ax.barh(y, longest, color=[styles[s]["color"] for s in part["series"]], height=0.6)
        for yi, (_, row) in zip(y, part.iterrows()):
            end = max(float(row["longest_ok"]) if pd.notna(row["longest_ok"]) else 0.0, left)
            room = np.log2(right / end) >= 2.5  # octaves right of the bar: enough for the text beside it
            ax.text(
                end * (1.1 if room else 0.9),
                yi,
                max_length_text(row),
                va="center",
                ha="left" if room else "right",
                fontsize=7,
                color="black" if room else plotting_ink(styles[row["series"]]["color"]),
            )
        ax.set_yticks(y, part["series"], fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlim(left=left, right=right)
        ax.axvline(float(part["longest_tried"].max()), color="gray", linestyle=":", linewidth=1)
        ax.xaxis.set_major_formatter(plotting.n_formatter())
        ax.set_xlabel("longest N that ran ok (dotted: the longest N tried)")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in axes[len(found) :]:
        ax.set_visible(False)
    fig.suptitle("Longest sequence each variant ran, and what stopped it (any input distribution)", fontsize=11)
    plotting.save(plt, fig, path)
    return path


def max_length_axis(part: pd.DataFrame) -> tuple[float, float]:
    """The x range of one panel: from half its shortest bar or failure to 1.5x the longest N tried (room for the
    text), never beyond: a run that stopped at 8K is not drawn to 32K."""
    ends = pd.concat([part["longest_ok"], part["failed_at"], part["longest_tried"]]).dropna().astype(float)
    ends = ends[ends > 0]
    return (float(ends.min()) / 2, float(part["longest_tried"].max()) * 1.5) if len(ends) else (1.0, 2.0)


def max_length_text(row: pd.Series) -> str:
    """What stopped a series: 'timeout at 8K', 'never ran ok (unreachable at 256)', 'ran every N tried (to 4K)'."""
    status = {"oom": "OOM"}.get(row["failed_status"], row["failed_status"])
    if pd.isna(row["longest_ok"]):
        return (
            f"never ran ok ({status} at {format_n(row['failed_at'])})" if pd.notna(row["failed_at"]) else "never ran ok"
        )
    if pd.notna(row["failed_at"]):
        return f"{status} at {format_n(row['failed_at'])}"
    return f"ran every N tried (to {format_n(row['longest_tried'])})"


def plotting_ink(color: str) -> str:
    """White text on a dark bar, black on a light one."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
