"""The report's figures, one function per PNG (shared styles and axes in harness.report.plotting).

Log-log axes where scaling matters; OOM points are drawn as crosses at the top of the axes.
Each function writes one PNG with a stable file name and returns its path, or None when there
is nothing to draw.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.report.analysis import pareto_front, pareto_length, primary_inputs, select, setting_title
from harness.report.formatting import format_n
from harness.report.maps import MapSet
from harness.report import plotting

LIMIT_STATUSES = ("oom", "timeout")  # the failures that make a length limit worth a figure


def plot_metric_vs_n(frame: pd.DataFrame, metric: str, path: Path, *, ylabel: str, title: str,
                     logy: bool = True, hline: float | None = None, bytes_axis: bool = False,
                     ratio_axis: bool = False, seconds_axis: bool = False) -> Path | None:
    """One subplot per setting: `metric` of every series against N, one input distribution, OOM marked."""
    inputs = primary_inputs(frame)
    rows = frame[frame["inputs"] == inputs] if len(frame) else frame
    if not len(rows) or not rows[metric].notna().any():
        return None
    found = plotting.with_data(rows, metric)
    plt, fig, axes = plotting.grid(len(found))
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(rows, setting)
        for label, group in part.groupby("series", sort=True):
            ok = group[(group["status"] == "ok") & group[metric].notna()].groupby("seq_len")[metric].median()
            if len(ok):
                ax.plot(ok.index, ok.values, label=label, **styles[label], linewidth=1.6, markersize=4)
                noisy = group[(group["noisy"] == True) & group["seq_len"].isin(ok.index)]["seq_len"].unique()  # noqa: E712
                if len(noisy):  # hollow markers: timed under load or noisily (docs/timing.md)
                    ax.plot(noisy, ok.loc[noisy].values, linestyle="none", marker=styles[label].get("marker", "o"),
                            markersize=8, markerfacecolor="white", markeredgecolor=styles[label].get("color"), zorder=3)
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


def plot_error_vs_n(frame: pd.DataFrame, path: Path) -> Path | None:
    """Relative L2 error against N: a row of subplots per setting, one column per input distribution."""
    if not len(frame) or not frame["rel_l2_error"].notna().any():
        return None
    found = plotting.with_data(frame, "rel_l2_error")
    dists = sorted({str(v) for v in frame["inputs"]})
    plt, fig, axes = plotting.grid(len(found) * len(dists), ncols=len(dists))
    styles = plotting.series_styles(frame)
    for i, setting in enumerate(found):
        part = select(frame, setting)
        for j, dist in enumerate(dists):
            ax = axes[i * len(dists) + j]
            sub = part[part["inputs"] == dist]
            for label, group in sub.groupby("series", sort=True):
                ok = group[(group["status"] == "ok") & group["rel_l2_error"].notna()].groupby("seq_len")["rel_l2_error"].median()
                if len(ok):
                    ax.plot(ok.index, np.maximum(ok.values, 1e-12), label=label, **styles[label], linewidth=1.6, markersize=4)
                plotting.mark_oom(ax, group, styles[label])
            plotting.log_n_axis(ax, part)
            plotting.log_axis(ax.yaxis, ax.set_yscale)
            ax.set_title(f"inputs: {dist}\n{setting_title(setting)}", fontsize=8)
            ax.set_ylabel("relative L2 error")
            ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, "Error against exact float64 attention", path)
    return path


def plot_pareto(frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: worst error over input distributions vs latency at the longest N every series ran; front joined."""
    ok = frame[frame["status"] == "ok"] if len(frame) else frame
    if not len(ok) or not ok["rel_l2_error"].notna().any():
        return None
    inputs = primary_inputs(frame)
    found = plotting.with_data(ok, "rel_l2_error")
    plt, fig, axes = plotting.grid(len(found))
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(ok, setting)
        n = pareto_length(part)
        at_n = part[part["seq_len"] == n]
        points = at_n.groupby("series").agg(error=("rel_l2_error", "max")).join(
            at_n[at_n["inputs"] == inputs].groupby("series").agg(latency=("latency_s", "median"))
        ).dropna().reset_index()
        points["error"] = points["error"].clip(lower=1e-12)
        front = pareto_front(points, "latency", "error")
        if len(front) > 1:
            ax.step(front["latency"], front["error"], where="post", color="gray", linewidth=1, alpha=0.7, label="_front")
        for _, p in points.iterrows():
            on_front = p["series"] in set(front["series"])
            style = styles[p["series"]]
            ax.scatter(p["latency"], p["error"], color=style["color"], marker=style["marker"], s=70 if on_front else 35,
                       edgecolors="black" if on_front else "none", zorder=3, label=p["series"])
            ax.annotate(p["series"], (p["latency"], p["error"]), textcoords="offset points", xytext=(5, 4), fontsize=7)
        plotting.log_axis(ax.xaxis, ax.set_xscale)
        plotting.log_axis(ax.yaxis, ax.set_yscale)
        plotting.seconds_axis(ax.xaxis)
        ax.set_xlabel(f"latency at N={n} (inputs: {inputs})")
        ax.set_ylabel("worst relative L2 error")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    plotting.finish(plt, fig, axes, styles, "Error vs latency (outlined: the Pareto front, better is lower-left)", path)
    return path


def plot_memory_limits(limits: pd.DataFrame, frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: a bar per series to the longest N that ran, annotated with the first OOM (or none).

    None (no file) unless some cell ran out of memory or timed out: without a limit hit, every bar would read "ran every N tried".
    """
    if not frame["status"].isin(LIMIT_STATUSES).any() or not len(limits) or limits["longest_ok"].isna().all():
        return None
    found = plotting.with_data(limits, "longest_ok")
    plt, fig, axes = plotting.grid(len(found), height=0.35 * limits["series"].nunique() + 1.2)
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(limits, setting).sort_values("series", ascending=False)
        y = np.arange(len(part))
        longest = part["longest_ok"].astype(float).fillna(0)
        ax.barh(y, longest, color=[styles[s]["color"] for s in part["series"]], height=0.6)
        for yi, (_, row) in zip(y, part.iterrows()):
            if pd.isna(row["longest_ok"]):
                text = "never ran ok"
            elif pd.notna(row["failed_at"]):
                text = f"{'OOM' if row['failed_status'] == 'oom' else row['failed_status']} at {format_n(row['failed_at'])}"
            else:
                text = f"ran every N tried (up to {format_n(row['longest_tried'])})"
            ax.text(max(row["longest_ok"] or 0, 1) * 1.1, yi, text, va="center", fontsize=7)
        ax.set_yticks(y, part["series"], fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlim(left=max(1, float(longest[longest > 0].min()) / 2) if (longest > 0).any() else 1,
                    right=float(part["longest_tried"].max()) * 4)
        ax.xaxis.set_major_formatter(plotting.n_formatter())
        ax.set_xlabel("longest N that ran")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in axes[len(found):]:
        ax.set_visible(False)
    fig.suptitle("Longest sequence each variant ran, and what stopped it (any input distribution)", fontsize=11)
    plotting.save(plt, fig, path)
    return path


def plot_attention_maps(maps: MapSet, path: Path, *, colors: dict[str, str] | None = None) -> Path:
    """Heatmaps side by side: the exact softmax weights, then each series' effective map on the same colour scale."""
    plt = plotting.pyplot()
    panels = [("exact (float64)", maps.exact, "", None)] + [(p.label, p.weights, p.note, p.rel_error) for p in maps.panels]
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.1 * ncols + 0.8, 3.2 * nrows + 0.6), squeeze=False, constrained_layout=True)
    axes = axes.ravel()
    vmax = float(np.max(maps.exact)) * (1 + 1e-3) or 1.0  # headroom: rounding-level excess is not "over"
    # red: negative weights (a linear kernel or a projection can produce them); white: above the exact maximum
    cmap = plt.get_cmap("viridis").with_extremes(under="red", over="white")
    image = None
    for ax, (label, weights, note, rel) in zip(axes, panels):
        variant = label.split("(")[0]
        title_color = (colors or {}).get(variant, "black")
        if weights is None:
            ax.text(0.5, 0.5, plotting.wrap(note, 34), ha="center", va="center", fontsize=7, transform=ax.transAxes, wrap=True)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(label, fontsize=9, color=title_color)
            continue
        image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
        subtitle = "" if rel is None else f"\nweights rel. error {rel:.2g}"
        ax.set_title(f"{label}{subtitle}", fontsize=9, color=title_color)
        if note:
            ax.set_xlabel(plotting.wrap(note, 40), fontsize=6)
        ax.tick_params(labelsize=6)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=list(axes[: len(panels)]), shrink=0.8, extend="both", label="weight (red < 0, white > exact max)")
    how = "learnable variants calibrated at this N" if maps.calibrated else "learnable variants as built (uncalibrated, seeded)"
    causal = ", causal" if maps.causal else ""
    fig.suptitle(f"Effective attention maps, N = M = D = {maps.n}, inputs {maps.inputs}, seed {maps.seed}{causal}; "
                 f"row = query, column = key; {how}", fontsize=9)
    plotting.save(plt, fig, path)
    return path
