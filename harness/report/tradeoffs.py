"""Where each series stands against the others and against the machine: the Pareto figure (error against latency
at each N, the front among the series within the largest budget) and the roofline (every ok row's arithmetic intensity
against the FLOP/s it achieved, under the machine's measured ceilings: env.json "limits", harness.measure.limits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from harness.error_metrics import METRIC_NAMES
from harness.report import plotting
from harness.report.analysis import is_baseline_series, pareto_front, primary_inputs, select, setting_title, settings
from harness.report.curves import MIN_ERROR
from harness.report.render import format_n
from harness.store import COL

PARETO_COLUMNS = 3  # panels (lengths) per line of the Pareto figure; a setting with more lengths takes several lines
FRONT_GID, OUTSIDE_GID = "pareto-front", "outside-budget"  # gids of the Pareto points (the tests find them by these)


def plot_pareto(frame: pd.DataFrame, path: Path, *, budgets: Sequence[float], metric: str) -> Path | None:
    """Error (the run's metric) against latency on the primary inputs: a row of panels per setting, one panel per N.

    Filled: within the largest budget; the Pareto front (outlined, joined) is computed over those only. Hollow:
    outside every budget, drawn but never on the front. Each budget is a dashed line.
    """
    inputs = primary_inputs(frame)
    ok = (
        frame[
            (frame[COL.status] == "ok")
            & (frame[COL.inputs] == inputs)
            & frame["error"].notna()
            & frame[COL.latency_s].notna()
        ]
        if len(frame)
        else frame
    )
    if not len(ok):
        return None
    blocks = [(setting, sorted(set(select(ok, setting)[COL.seq_len]))) for setting in settings(ok)]
    ncols = min(PARETO_COLUMNS, max(len(lengths) for _, lengths in blocks))
    lines = [(setting, lengths[k : k + ncols]) for setting, lengths in blocks for k in range(0, len(lengths), ncols)]
    plt, fig, axes = plotting.grid(len(lines) * ncols, ncols=ncols, width=3.6, height=3.0)
    styles = plotting.series_styles(frame, outside=plotting.outside_budget(ok))
    shared: dict[int, list] = {}  # a setting's panels share one error range
    for i, (setting, lengths) in enumerate(lines):
        part = select(ok, setting)
        for j, (ax, n) in enumerate(zip(axes[i * ncols : i * ncols + len(lengths)], lengths)):
            _pareto_panel(ax, part[part[COL.seq_len] == n], styles, budgets, metric)
            first = n == min(part[COL.seq_len])
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
        at_n.groupby(COL.series)
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
    on_front = set(front[COL.series])
    for _, p in points.iterrows():
        style = styles[p[COL.series]]
        if p["in_budget"]:
            big = p[COL.series] in on_front
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
    few_log_ticks(ax.xaxis, ax.get_xlim())
    ax.grid(True, which="major", alpha=0.3)


ROUNDING_FACTOR = 4.0  # errors within this factor of dense's own (its rounding error) count as exact


def rounding_floor(points: pd.DataFrame) -> float:
    """The error at or below which a point counts as exact as dense: ROUNDING_FACTOR x dense's error at this N
    (0 where dense has no point: every difference then counts)."""
    dense = points[points[COL.series].map(is_baseline_series)]["error"]
    return float(dense.min()) * ROUNDING_FACTOR if len(dense) and np.isfinite(dense.min()) else 0.0


def _share_y(axes, errors: pd.Series, budgets: tuple[float, ...]) -> None:
    """One log error range for a row of panels (its points and budgets), so the panels of one setting line up."""
    values = [float(e) for e in errors.clip(lower=MIN_ERROR)] + list(budgets)
    for ax in axes:
        plotting.log_axis(ax.yaxis, ax.set_yscale)
        ax.set_ylim(min(values) / 3, max(values) * 3)


def few_log_ticks(axis, limits: tuple[float, float], *, most: int = 6) -> None:
    """Fixed labelled ticks on a log axis: 1, 2, 5 x 10^k, or on a narrow span 1, 1.5, 2, 3, 5, 7 x 10^k, at most
    `most` of them (matplotlib's own locator falls back to crowded linear steps on spans under a decade)."""
    from matplotlib.ticker import FixedLocator  # heavy: loaded on the first figure drawn

    low, high = sorted(limits)
    if low <= 0:
        return
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    for subs in ((1.0, 1.5, 2.0, 3.0, 5.0, 7.0), (1.0, 2.0, 5.0), (1.0,)):
        ticks = [m * 10.0**d for d in decades for m in subs if low <= m * 10.0**d <= high]
        if len(ticks) <= most:
            break
    axis.set_major_locator(FixedLocator(ticks))


# ---- the roofline ------------------------------------------------------------------------------------
PHASE_MARKERS = {"prefill": "o", "decode": "^"}  # decode hollow, prefill filled


def roofline_points(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok rows with what the figure needs: intensity (FLOP/byte) and achieved executed FLOP/s."""
    need = ("flops", "bytes_moved", "latency_s")
    if not len(frame) or any(c not in frame for c in need):
        return frame.iloc[0:0]
    ok = frame[frame[COL.status] == "ok"].copy()
    for c in need:
        ok[c] = pd.to_numeric(ok[c], errors="coerce")
    ok = ok[(ok[COL.flops] > 0) & (ok[COL.bytes_moved] > 0) & (ok[COL.latency_s] > 0)]
    ok["intensity"] = ok[COL.flops] / ok[COL.bytes_moved]
    ok["achieved"] = ok[COL.flops] / ok[COL.latency_s]
    return ok


def has_roofline(frame: pd.DataFrame, env: dict[str, Any]) -> bool:
    """Whether the run has measured limits and an ok row to place under them."""
    limits = (env or {}).get("limits")
    return isinstance(limits, dict) and bool(limits.get("dtypes")) and bool(len(roofline_points(frame)))


def plot_roofline(frame: pd.DataFrame, env: dict[str, Any], path: Path) -> Path | None:
    """Log-log intensity vs achieved FLOP/s, one colour per variant, filled circles prefill, hollow triangles decode,
    red crosses over rows flagged impossible; the measured ceilings min(peak, bandwidth * intensity) per dtype."""
    points = roofline_points(frame)
    limits = (env or {}).get("limits") or {}
    if not len(points) or not limits.get("dtypes"):
        return None
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    lo = min(points["intensity"].min(), 0.1) / 2
    hi = max(points["intensity"].max(), 100.0) * 2
    x = np.geomspace(lo, hi, 200)
    bandwidth = None
    for dtype, entry in sorted(limits["dtypes"].items()):
        if dtype not in set(points[COL.dtype]) and dtype != "float32":
            continue
        peak, bandwidth = entry.get("ceiling_flops") or entry.get("peak_flops"), entry.get("bandwidth_bytes_per_s")
        if peak and bandwidth:
            ax.plot(x, np.minimum(peak, bandwidth * x), color="grey", lw=1.5, ls="-" if dtype == "float32" else "--")
            ax.annotate(f"{dtype} peak {peak / 1e9:.3g} GFLOP/s", (hi, peak), ha="right", va="bottom", fontsize=8)
    if bandwidth:
        ax.annotate(f"bandwidth {bandwidth / 1e9:.3g} GB/s", (lo * 1.5, bandwidth * lo * 3), fontsize=8)
    colors = plotting.variant_colors(list(points[COL.variant]))
    for (variant, phase), part in points.groupby([COL.variant, COL.phase], sort=True):
        filled = phase != "decode"
        ax.scatter(
            part["intensity"],
            part["achieved"],
            marker=PHASE_MARKERS.get(phase, "s"),
            facecolors=colors[variant] if filled else "none",
            edgecolors=colors[variant],
            label=f"{variant} {phase}",
            s=36,
        )
    if COL.impossible in points:
        flagged = points[points[COL.impossible].notna()]
        if len(flagged):
            ax.scatter(flagged["intensity"], flagged["achieved"], marker="x", color="red", s=80, label="impossible")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (executed FLOPs per byte moved)")
    ax.set_ylabel("achieved FLOP/s (executed)")
    ax.set_title("Roofline: every ok row under the measured ceilings")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.set_dpi(plotting.DPI)
    plotting.save(plt, fig, path)
    return path
