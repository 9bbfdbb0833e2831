"""What every figure shares: matplotlib on the Agg backend (chosen here, once, on first use), colours, styles, axes.

One colour per variant in every figure (dense black, built-ins fixed, others from the sorted
names), one line style and marker per config within a variant. Nothing here runs at import time:
matplotlib is imported inside the helpers. The studies' figures use pyplot() too.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Sequence

import numpy as np
import pandas as pd

from harness.report.analysis import budget_text, select, settings
from harness.report.render import Block, format_bytes, format_n, format_seconds
from harness.store import COL
from harness.safe_files import write_figure

FIXED_COLORS = {
    "dense": "black",
    "chunked": "tab:blue",
    "sliding_window": "tab:orange",
    "linformer": "tab:green",
    "distilled": "tab:red",
}
OTHER_COLORS = (
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
    "gold",
    "navy",
    "teal",
    "maroon",
)
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DPI = 110
OUTSIDE_LABEL = " (outside every budget)"  # legend suffix of a series none of whose rows is within the largest budget
OUTSIDE_ALPHA = 0.45  # how faded such a series is drawn
BAND_ALPHA = 0.2  # the p20-p80 band around a median line
MAX_BYTE_TICKS = 8  # labelled ticks on a bytes axis
BUDGET_GID = "budget"  # the gid of budget_lines' lines
# mark_failures' marks at the top of the axes, per status: (gid, marker, legend entry); finish adds an entry to the
# legend only where one is drawn
FAILURE_MARKS = {"oom": ("oom", "x", "out of memory"), "timeout": ("timeout", "|", "timed out")}
SEARCH_GID = "search-best"  # plot_error_vs_n's hollow points of unreachable rows: the best error their search scored
SEARCH_LABEL = "hollow, dotted: unreachable\n(its search's best error)"


def pyplot():
    """matplotlib.pyplot on the Agg backend: files only, never a window (safe on headless CI)."""
    import matplotlib  # heavy: loaded on the first figure drawn

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # heavy: loaded on the first figure drawn

    return plt


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """Colour per variant name: dense black, the built-ins fixed, the rest from the sorted names (cycled)."""
    others = sorted(v for v in set(variants) if v not in FIXED_COLORS)
    colors = dict(FIXED_COLORS)
    colors.update({v: OTHER_COLORS[i % len(OTHER_COLORS)] for i, v in enumerate(others)})
    return {v: colors[v] for v in set(variants)}


def series_styles(frame: pd.DataFrame, *, outside: Collection[str] = ()) -> dict[str, dict]:
    """matplotlib style per series label: the variant's colour, a line style and marker per config, and the legend label.

    A series in `outside` (see outside_budget) is faded and dotted, and its label says "(outside every budget)",
    so it never reads as a winner while its rows stay drawn.
    """
    if not len(frame):
        return {}
    colors = variant_colors(list(frame[COL.variant]))
    styles = {}
    pairs = sorted(set(zip(frame[COL.variant], frame[COL.series])))
    others = sorted({v for v, _ in pairs} - {"dense"})
    for variant in sorted({v for v, _ in pairs}):
        labels = [s for v, s in pairs if v == variant]
        # dense solid with circles; each other variant starts further along, so two exact variants whose lines lie on
        # each other (chunked under dense) still differ in marker and dash
        start = others.index(variant) + 1 if variant in others else 0
        for i, label in enumerate(labels):
            styles[label] = dict(
                color=colors[variant],
                linestyle=LINESTYLES[(start + i) % len(LINESTYLES)],
                marker=MARKERS[(start + i) % len(MARKERS)],
                label=label,
            )
            if label in outside:
                styles[label].update(linestyle=":", alpha=OUTSIDE_ALPHA, label=label + OUTSIDE_LABEL)
    return styles


def outside_budget(rows: pd.DataFrame) -> set[str]:
    """The series of `rows` with a measured error of which no ok row is a candidate within the largest budget."""
    if "in_budget" not in rows:  # a frame without budgets (harness.report.analysis.with_budgets): nothing is outside
        return set()
    ok = rows[(rows[COL.status] == "ok") & rows["error"].notna()]
    return {str(s) for s, group in ok.groupby(COL.series) if not group["in_budget"].astype(bool).any()}


def with_data(frame: pd.DataFrame, column: str) -> list[dict]:
    """The settings with at least one value of `column` (a setting of only failed cells gets no empty panel)."""
    return [s for s in settings(frame) if select(frame, s)[column].notna().any()]


def grid(count: int, *, ncols: int | None = None, width: float = 5.2, height: float = 3.6):
    """(pyplot, figure, flat list of axes) for `count` panels of width x height inches, two per row unless `ncols`."""
    plt = pyplot()
    ncols = ncols or min(2, max(1, count))
    nrows = max(1, -(-count // ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols + 2.2, height * nrows + 0.7), squeeze=False, constrained_layout=True
    )
    return plt, fig, list(axes.ravel())


def finish(plt, fig, axes, styles: dict, title: str, path: Path) -> None:
    """One legend for the figure (a failure mark's entry only where mark_failures drew one), empty panels hidden, title,
    save, close."""
    from matplotlib.lines import Line2D  # heavy: loaded on the first figure drawn

    by_label = {style["label"]: style for style in styles.values()}
    used = sorted({label for ax in axes for label in ax.get_legend_handles_labels()[1] if not label.startswith("_")})
    handles = [Line2D([], [], **by_label[label]) for label in used if label in by_label]
    gids = {line.get_gid() for ax in axes for line in ax.get_lines()}
    for gid, marker, label in FAILURE_MARKS.values():
        if gid in gids:
            handles.append(Line2D([], [], color="dimgray", marker=marker, linestyle="none", markersize=7, label=label))
    if SEARCH_GID in gids:
        handles.append(
            Line2D([], [], color="dimgray", marker="o", markerfacecolor="white", linestyle=":", label=SEARCH_LABEL)
        )
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    for ax in axes:
        if not ax.has_data():
            ax.set_visible(False)
        _tidy_log(ax)
    # left, and wrapped to the panels' width (~8 characters an inch): clear of the legend at the upper right
    width = int(max(fig.get_size_inches()[0] - 2.2, 3.0) * 8)
    lines = [part for line in title.split("\n") for part in textwrap.wrap(line, width, break_on_hyphens=False)]
    fig.suptitle("\n".join(lines), fontsize=11, x=0.02, ha="left")
    save(plt, fig, path)


def budget_lines(ax, budgets: Sequence[float], metric: str) -> None:
    """A dashed horizontal line per error budget, its value written at the right edge."""
    for budget in budgets:
        ax.axhline(budget, color="dimgray", linestyle="--", linewidth=0.9, label="_budget", gid=BUDGET_GID)
        ax.text(
            0.99,
            budget,
            f"budget {budget_text(budget, metric)}",
            transform=ax.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=7,
            color="dimgray",
        )


def save(plt, fig, path: Path, *, dpi: int = DPI) -> None:
    """The figure as a PNG at `path` (never through a symbolic link: harness.safe_files), then closed."""
    try:
        write_figure(fig, path, dpi=dpi)
    finally:
        plt.close(fig)


def log_axis(axis, set_scale) -> None:
    """A log scale with unlabelled minor ticks (labelling them costs most of a figure's drawing time)."""
    from matplotlib.ticker import NullFormatter  # heavy: loaded on the first figure drawn

    set_scale("log")
    axis.set_minor_formatter(NullFormatter())


def _tidy_log(ax) -> None:
    """On log axes spanning several decades, no minor ticks (drawing them costs seconds); on a narrow
    span, majors at 1, 2, 5 x 10^k so that some value is labelled."""
    from matplotlib.ticker import LogLocator, NullLocator  # heavy: loaded on the first figure drawn

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        locator = axis.get_major_locator()
        if not isinstance(locator, LogLocator) or getattr(locator, "_base", None) != 10 or min(limits) <= 0:
            continue  # linear, or a base-2 N axis with its own ticks
        if np.log10(max(limits) / min(limits)) > 2.5:
            axis.set_minor_locator(NullLocator())
        else:
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))


def log_n_axis(ax, part: pd.DataFrame) -> None:
    """A base-2 N axis with a tick (4K, 8K...) at each measured length."""
    from matplotlib.ticker import NullLocator  # heavy: loaded on the first figure drawn

    ax.set_xscale("log", base=2)
    lengths = sorted(set(part[COL.seq_len]))
    if lengths:
        ax.set_xticks(lengths)
        ax.xaxis.set_major_formatter(n_formatter())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(lengths[0] / 1.3, lengths[-1] * 1.3)
    ax.set_xlabel("sequence length N")


def n_formatter():
    from matplotlib.ticker import FuncFormatter  # heavy: loaded on the first figure drawn

    return FuncFormatter(lambda x, _: format_n(x))


def bytes_axis(ax) -> None:
    """Labelled ticks at powers of two in binary units, every `step`-th one for the smallest step of 1, 2, 5, 10... that
    keeps at most MAX_BYTE_TICKS in view (so 1 KiB, 1 MiB and 1 GiB are labelled whenever in view, up to 50 decades of
    two); unlabelled minor ticks at the other powers of two."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # heavy: loaded on the first figure drawn

    low, high = ax.get_ylim()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: format_bytes(y)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    first, last = int(np.ceil(np.log2(max(low, 1.0)))), int(np.floor(np.log2(max(high, 2.0))))
    if first > last:  # no power of two in view: one labelled tick in the middle
        ax.yaxis.set_major_locator(FixedLocator([float(np.sqrt(max(low, 1.0) * high))]))
        return
    step = next(s for s in (1, 2, 5, 10, 20, 50) if (last - first) // s + 1 <= MAX_BYTE_TICKS)
    start = -(-first // step) * step  # the first multiple of step in view
    ax.yaxis.set_major_locator(FixedLocator([2.0**e for e in range(start, last + 1, step)]))
    ax.yaxis.set_minor_locator(FixedLocator([2.0**e for e in range(first, last + 1) if (e - start) % step]))
    ax.set_ylim(low, high)


def seconds_axis(axis) -> None:
    """Labels like 10 ms instead of 10^-2 on a log time axis."""
    from matplotlib.ticker import FuncFormatter  # heavy: loaded on the first figure drawn

    axis.set_major_formatter(FuncFormatter(lambda t, _: format_seconds(t)))


def ratio_axis(ax) -> None:
    """Plain labels (0.5x, 1x, 10x) on a log axis instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter  # heavy: loaded on the first figure drawn

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def wrap(text: str, width: int) -> str:
    """At most 8 lines of `width` characters (a panel's note)."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)[:8])


def ink(color: str) -> str:
    """Black or white text, whichever reads on a cell or bar of this colour."""
    from matplotlib.colors import to_rgb  # heavy: loaded on the first figure drawn

    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


@dataclass(frozen=True)
class Drawn:
    """What drawing a figure gave (harness.report.figures): the file, and for a figure whose caption depends on the
    drawing, that caption and the blocks that follow it."""

    path: Path
    caption: str | None = None  # None: the Figure's own caption
    after: list[Block] = field(default_factory=list)
