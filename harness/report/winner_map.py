"""The winner map: a grid N x error budget per setting and inputs, coloured by the winning variant.

Each cell is the winner of harness.report.choice, labelled with its speed-up over dense and its config."""

from __future__ import annotations

from pathlib import Path

from harness.error_metrics import budget_label
from harness.report.choice import AnswerTable
from harness.report.plotting import pyplot, save, variant_colors, wrap
from harness.report.render import format_n, format_seconds, format_times
from harness.schema import BASELINE

NONE_COLOR = "#e6e6e6"  # no candidate ran within the budget


def winner_map(tables: list[AnswerTable], titles: list[str], path: Path) -> Path | None:
    """Draw one panel per table (titled by `titles`) into `path`; None (nothing written) when there is no table."""
    if not tables:
        return None
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    plt = pyplot()
    colors = variant_colors(sorted({p.variant for t in tables for p in t.picks.values() if p.variant}))
    ncols = min(2, len(tables))
    nrows = -(-len(tables) // ncols)
    width = max(len(t.lengths) for t in tables)
    height = max(len(t.budgets) for t in tables)
    fig_width = max(ncols * (1.0 + 0.95 * width) + 1.6, 6.0)  # the legend's line fits under a narrow map
    fig, axes = plt.subplots(
        nrows, ncols, squeeze=False, constrained_layout=True, figsize=(fig_width, nrows * (1.0 + 0.55 * height) + 1.3)
    )
    flat = list(axes.ravel())
    for ax, table, title in zip(flat, tables, titles):
        image = [
            [
                to_rgb(colors[p.variant]) if p.variant else to_rgb(NONE_COLOR)
                for p in (table.picks[(n, b)] for n in table.lengths)
            ]
            for b in table.budgets
        ]
        ax.imshow(image, aspect="auto", origin="lower", alpha=0.85)
        for x, n in enumerate(table.lengths):
            for y, b in enumerate(table.budgets):
                p = table.picks[(n, b)]
                ax.text(
                    x,
                    y,
                    _cell_text(p),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color=_ink(colors[p.variant]) if p.variant else "dimgray",
                )
        for x in range(1, len(table.lengths)):
            ax.axvline(x - 0.5, color="white", linewidth=1.5)
        for y in range(1, len(table.budgets)):
            ax.axhline(y - 0.5, color="white", linewidth=1.5)
        ax.set_xticks(range(len(table.lengths)), [format_n(n) for n in table.lengths])
        ax.set_yticks(range(len(table.budgets)), [budget_label(b, table.metric, ascii=False) for b in table.budgets])
        ax.set_xlabel("sequence length N")
        ax.set_title(wrap(title, int(9 * (fig_width - 1.6) / ncols)), fontsize=9)
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
    for ax in flat[len(tables) :]:
        ax.set_visible(False)
    handles = legend_handles(tables, colors, Patch)
    # below the panels, so it never meets the title (one line per ~4 entries)
    columns = max(1, min(len(handles), int(fig_width // 3.0)))  # entries of ~3 inches side by side, never cut
    fig.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize=8, frameon=False)
    # a narrow map (few N) gets its title on several lines: wider than the figure it would be cut at both ends
    fig.suptitle(
        wrap(
            "Which one should I use: the fastest within each error budget (speed-up over dense)",
            int(9 * (fig_width - 1.6)),
        ),
        fontsize=10,
    )
    save(plt, fig, path)
    return path


DENSE_FAILED = {"timeout": "timed out", "oom": "out of memory"}  # a grey cell's second line: why dense is no answer
TIE_MARK = "~"  # after a winner's number: its interval overlaps the runner-up's (the legend says so)


def legend_handles(tables: list[AnswerTable], colors: dict[str, str], patch) -> list:
    """A patch per winning variant, then what the marks mean where the map has them: a grey cell, a tie."""
    picks = [p for t in tables for p in t.picks.values()]
    handles = [patch(color=colors[v], alpha=0.85, label=v) for v in sorted({p.variant for p in picks if p.variant})]
    if any(p.label is None for p in picks):
        handles.append(patch(color=NONE_COLOR, label="none within budget ran"))
    if any(p.tie for p in picks):
        handles.append(patch(color="none", label=f"{TIE_MARK} a tie: intervals overlap"))
    return handles


def _cell_text(p) -> str:
    """'3.1x' (a tie marked TIE_MARK) over the config ('window=512'), 'dense', 'none ran' where nothing ran (with
    'dense timeout' where dense ran but did not finish), the latency where dense did not run."""
    if p.label is None:
        return "none ran" + (f"\ndense {DENSE_FAILED.get(p.dense_status, p.dense_status)}" if p.dense_status else "")
    if p.variant == BASELINE and p.speedup == 1:
        return "dense" + (TIE_MARK if p.tie else "")
    number = (
        f"{format_times(p.speedup)}x" + (TIE_MARK if p.tie else "")
        if p.speedup == p.speedup
        else format_seconds(p.latency_s)
    )
    config = p.label[len(p.variant) + 1 : -1] if p.label.startswith(f"{p.variant}(") else ""
    return f"{number}\n{config}" if config else number


def _ink(color: str) -> str:
    """Black or white text, whichever reads on the cell's colour."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
