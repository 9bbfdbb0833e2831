"""The report's figures (matplotlib, Agg backend chosen inside each call; nothing at import time).

One colour per variant in every figure (dense black, built-ins fixed, others from the sorted
names), one line style and marker per config within a variant. Log-log axes where scaling
matters; OOM points are drawn as crosses at the top of the axes. Each function writes one PNG
with a stable file name and returns its path, or None when there is nothing to draw.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from harness.analysis import pareto_front, pareto_length, primary_inputs, select, setting_title, settings

FIXED_COLORS = {"dense": "black", "chunked": "tab:blue", "sliding_window": "tab:orange", "linformer": "tab:green", "distilled": "tab:red"}
OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold", "navy", "teal", "maroon")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DPI = 110
FIGURE_FILES = {  # stable names, so README can link a committed run's figures
    "latency": "latency_vs_n.png",
    "memory": "memory_vs_n.png",
    "speedup": "speedup_vs_n.png",
    "error": "error_vs_n.png",
    "pareto": "pareto.png",
    "limits": "max_length.png",
    "maps": "attention_maps.png",
}


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """Colour per variant name: dense black, the built-ins fixed, the rest from the sorted names (cycled)."""
    others = sorted(v for v in set(variants) if v not in FIXED_COLORS)
    colors = {v: c for v, c in FIXED_COLORS.items()}
    colors.update({v: OTHER_COLORS[i % len(OTHER_COLORS)] for i, v in enumerate(others)})
    return {v: colors[v] for v in set(variants)}


def series_styles(frame: pd.DataFrame) -> dict[str, dict]:
    """matplotlib style per series label: the variant's colour, and a line style and marker per config."""
    if not len(frame):
        return {}
    colors = variant_colors(list(frame["variant"]))
    styles = {}
    pairs = sorted(set(zip(frame["variant"], frame["series"])))
    for variant in sorted({v for v, _ in pairs}):
        labels = [s for v, s in pairs if v == variant]
        for i, label in enumerate(labels):
            styles[label] = dict(color=colors[variant], linestyle=LINESTYLES[i % len(LINESTYLES)], marker=MARKERS[i % len(MARKERS)])
    return styles


def plot_metric_vs_n(frame: pd.DataFrame, metric: str, path: Path, *, ylabel: str, title: str,
                     logy: bool = True, hline: float | None = None, bytes_axis: bool = False,
                     ratio_axis: bool = False, seconds_axis: bool = False) -> Path | None:
    """One subplot per setting: `metric` of every series against N, one input distribution, OOM marked."""
    inputs = primary_inputs(frame)
    rows = frame[frame["inputs"] == inputs] if len(frame) else frame
    if not len(rows) or not rows[metric].notna().any():
        return None
    found = _with_data(rows, metric)
    plt, fig, axes = _grid(len(found))
    styles = series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(rows, setting)
        for label, group in part.groupby("series", sort=True):
            ok = group[(group["status"] == "ok") & group[metric].notna()].groupby("seq_len")[metric].median()
            if len(ok):
                ax.plot(ok.index, ok.values, label=label, **styles[label], linewidth=1.6, markersize=4)
            _mark_oom(ax, group, styles[label])
        if hline is not None:
            ax.axhline(hline, color="gray", linewidth=0.8, linestyle="--")
        _log_n_axis(ax, part)
        if logy:
            _log_axis(ax.yaxis, ax.set_yscale)
        if bytes_axis:
            _bytes_axis(ax)
        if ratio_axis:
            _ratio_axis(ax)
        if seconds_axis:
            _seconds_axis(ax.yaxis)
        ax.set_title(setting_title(setting), fontsize=9)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    _finish(plt, fig, axes, styles, f"{title} (inputs: {inputs})", path)
    return path


def plot_error_vs_n(frame: pd.DataFrame, path: Path) -> Path | None:
    """Relative L2 error against N: a row of subplots per setting, one column per input distribution."""
    if not len(frame) or not frame["rel_l2_error"].notna().any():
        return None
    found = _with_data(frame, "rel_l2_error")
    dists = sorted({str(v) for v in frame["inputs"]})
    plt, fig, axes = _grid(len(found) * len(dists), ncols=len(dists))
    styles = series_styles(frame)
    for i, setting in enumerate(found):
        part = select(frame, setting)
        for j, dist in enumerate(dists):
            ax = axes[i * len(dists) + j]
            sub = part[part["inputs"] == dist]
            for label, group in sub.groupby("series", sort=True):
                ok = group[(group["status"] == "ok") & group["rel_l2_error"].notna()].groupby("seq_len")["rel_l2_error"].median()
                if len(ok):
                    ax.plot(ok.index, np.maximum(ok.values, 1e-12), label=label, **styles[label], linewidth=1.6, markersize=4)
                _mark_oom(ax, group, styles[label])
            _log_n_axis(ax, part)
            _log_axis(ax.yaxis, ax.set_yscale)
            ax.set_title(f"inputs: {dist}\n{setting_title(setting)}", fontsize=8)
            ax.set_ylabel("relative L2 error")
            ax.grid(True, which="major", alpha=0.3)
    _finish(plt, fig, axes, styles, "Error against exact float64 attention", path)
    return path


def plot_pareto(frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: worst error over input distributions vs latency at the longest N every series ran; front joined."""
    ok = frame[frame["status"] == "ok"] if len(frame) else frame
    if not len(ok) or not ok["rel_l2_error"].notna().any():
        return None
    inputs = primary_inputs(frame)
    found = _with_data(ok, "rel_l2_error")
    plt, fig, axes = _grid(len(found))
    styles = series_styles(frame)
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
        _log_axis(ax.xaxis, ax.set_xscale)
        _log_axis(ax.yaxis, ax.set_yscale)
        _seconds_axis(ax.xaxis)
        ax.set_xlabel(f"latency at N={n} (inputs: {inputs})")
        ax.set_ylabel("worst relative L2 error")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    _finish(plt, fig, axes, styles, "Error vs latency (outlined: the Pareto front, better is lower-left)", path, oom_note=False)
    return path


def plot_memory_limits(limits: pd.DataFrame, frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: a bar per series to the longest N that ran, annotated with the first OOM (or none)."""
    if not len(limits) or limits["longest_ok"].isna().all():
        return None
    found = _with_data(limits, "longest_ok")
    plt, fig, axes = _grid(len(found), height=0.35 * limits["series"].nunique() + 1.2)
    styles = series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(limits, setting).sort_values("series", ascending=False)
        y = np.arange(len(part))
        longest = part["longest_ok"].astype(float).fillna(0)
        ax.barh(y, longest, color=[styles[s]["color"] for s in part["series"]], height=0.6)
        for yi, (_, row) in zip(y, part.iterrows()):
            if pd.isna(row["longest_ok"]):
                text = "never ran ok"
            elif pd.notna(row["failed_at"]):
                text = f"{'OOM' if row['failed_status'] == 'oom' else row['failed_status']} at {_fmt_n(row['failed_at'])}"
            else:
                text = f"ran every N tried (up to {_fmt_n(row['longest_tried'])})"
            ax.text(max(row["longest_ok"] or 0, 1) * 1.1, yi, text, va="center", fontsize=7)
        ax.set_yticks(y, part["series"], fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlim(left=max(1, float(longest[longest > 0].min()) / 2) if (longest > 0).any() else 1,
                    right=float(part["longest_tried"].max()) * 4)
        ax.xaxis.set_major_formatter(_n_formatter())
        ax.set_xlabel("longest N that ran")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in axes[len(found):]:
        ax.set_visible(False)
    fig.suptitle("Longest sequence each variant ran, and what stopped it (any input distribution)", fontsize=11)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_attention_maps(maps, path: Path, *, colors: dict[str, str] | None = None) -> Path:
    """Heatmaps side by side: the exact softmax weights, then each series' effective map on the same colour scale."""
    plt = _pyplot()
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
            ax.text(0.5, 0.5, _wrap(note, 34), ha="center", va="center", fontsize=7, transform=ax.transAxes, wrap=True)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(label, fontsize=9, color=title_color)
            continue
        image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
        subtitle = "" if rel is None else f"\nweights rel. error {rel:.2g}"
        ax.set_title(f"{label}{subtitle}", fontsize=9, color=title_color)
        if note:
            ax.set_xlabel(_wrap(note, 40), fontsize=6)
        ax.tick_params(labelsize=6)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=list(axes[: len(panels)]), shrink=0.8, extend="both", label="weight (red < 0, white > exact max)")
    how = "learnable variants calibrated at this N" if maps.calibrated else "learnable variants as built (uncalibrated, seeded)"
    causal = ", causal" if maps.causal else ""
    fig.suptitle(f"Effective attention maps, N = M = D = {maps.n}, inputs {maps.inputs}, seed {maps.seed}{causal}; "
                 f"row = query, column = key; {how}", fontsize=9)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# ---- helpers --------------------------------------------------------------------------------------
def _with_data(frame: pd.DataFrame, column: str) -> list[dict]:
    """The settings with at least one value of `column` (a setting of only failed cells gets no empty panel)."""
    return [s for s in settings(frame) if select(frame, s)[column].notna().any()]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only; never a window (safe on headless CI)
    import matplotlib.pyplot as plt

    return plt


def _grid(count: int, *, ncols: int | None = None, height: float = 3.6):
    plt = _pyplot()
    ncols = ncols or min(2, max(1, count))
    nrows = max(1, -(-count // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols + 2.2, height * nrows + 0.7), squeeze=False, constrained_layout=True)
    return plt, fig, list(axes.ravel())


def _finish(plt, fig, axes, styles: dict, title: str, path: Path, *, oom_note: bool = True) -> None:
    from matplotlib.lines import Line2D

    used = sorted({label for ax in axes for label in ax.get_legend_handles_labels()[1] if not label.startswith("_")})
    handles = [Line2D([], [], **styles[label], label=label) for label in used if label in styles]
    if oom_note:
        handles.append(Line2D([], [], color="dimgray", marker="x", linestyle="none", markersize=7, label="out of memory"))
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    for ax in axes:
        if not ax.has_data():
            ax.set_visible(False)
        _tidy_log(ax)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _mark_oom(ax, group: pd.DataFrame, style: dict) -> None:
    """Crosses at the top of the axes at each N where the series ran out of memory."""
    oom = sorted(set(group[group["status"] == "oom"]["seq_len"]))
    if oom:
        ax.plot(oom, [0.96] * len(oom), transform=ax.get_xaxis_transform(), linestyle="none", marker="x",
                color=style["color"], markersize=8, markeredgewidth=2, clip_on=False)


def _log_axis(axis, set_scale) -> None:
    """A log scale with unlabelled minor ticks (labelling them costs most of a figure's drawing time)."""
    from matplotlib.ticker import NullFormatter

    set_scale("log")
    axis.set_minor_formatter(NullFormatter())


def _tidy_log(ax) -> None:
    """On log axes spanning several decades, no minor ticks (drawing them costs seconds); on a narrow
    span, majors at 1, 2, 5 x 10^k so that some value is labelled."""
    from matplotlib.ticker import LogLocator, NullLocator

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        locator = axis.get_major_locator()
        if not isinstance(locator, LogLocator) or getattr(locator, "_base", None) != 10 or min(limits) <= 0:
            continue  # linear, or a base-2 N axis with its own ticks
        if np.log10(max(limits) / min(limits)) > 2.5:
            axis.set_minor_locator(NullLocator())
        else:
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))


def _log_n_axis(ax, part: pd.DataFrame) -> None:
    ax.set_xscale("log", base=2)
    lengths = sorted(set(part["seq_len"]))
    if lengths:
        ax.set_xticks(lengths)
        ax.xaxis.set_major_formatter(_n_formatter())
        ax.xaxis.set_minor_locator(_null_locator())
        ax.set_xlim(lengths[0] / 1.3, lengths[-1] * 1.3)
    ax.set_xlabel("sequence length N")


def _n_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: _fmt_n(x))


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _bytes_axis(ax) -> None:
    """Ticks at powers of two (1 KiB, 4 KiB, ...) labelled in binary units, at most about 7 of them."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    low, high = ax.get_ylim()
    first, last = int(np.floor(np.log2(max(low, 1.0)))), int(np.ceil(np.log2(max(high, 2.0))))
    step = max(1, -(-(last - first) // 7))
    ax.yaxis.set_major_locator(FixedLocator([2.0**e for e in range(first, last + 1, step)]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: format_bytes(y)))
    ax.set_ylim(low, high)


def _seconds_axis(axis) -> None:
    """Labels like 10 ms instead of 10^-2 on a log time axis."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda t, _: format_seconds(t)))


def _ratio_axis(ax) -> None:
    """Plain labels (0.5x, 1x, 10x) on a log axis instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _fmt_n(x: float) -> str:
    x = float(x)
    if x >= 1024 and x % 1024 == 0:
        return f"{int(x) // 1024}K"
    return f"{int(x)}" if x == int(x) else f"{x:g}"


def format_seconds(value: float) -> str:
    """Seconds for people: 12.3 us, 4.56 ms, 1.23 s."""
    if value is None or not np.isfinite(value):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def format_bytes(value: float) -> str:
    """Bytes for people: 512 B, 3.0 KiB, 1.5 MiB, 2.0 GiB."""
    if value is None or not np.isfinite(value):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:8])
