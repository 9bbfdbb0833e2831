"""The two heatmap figures: the winner map (a grid N x error budget per setting and inputs, coloured by the winning
variant of harness.report.choice, labelled with its speed-up over dense and its config) and the effective attention
maps (harness.report.maps: which series are drawn, on which inputs, in a child process, with their caption and table).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from harness.entries import parse_entry
from harness.error_metrics import budget_label
from harness.report.analysis import setting_title
from harness.report.choice import AnswerTable, config_text, table_titles
from harness.report.maps_isolated import isolated_maps
from harness.report.maps_plot import plot_attention_maps
from harness.report.plotting import Drawn, ink, pyplot, save, variant_colors, wrap
from harness.report.render import Table, format_n, format_number, format_seconds, format_times
from harness.schema import BASELINE
from harness.store import COL
from variants import NotSupportedError, get_variant

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

# ---- the winner map ----------------------------------------------------------------------------------
NONE_COLOR = "#e6e6e6"  # no candidate ran within the budget


def winner_map(tables: list[AnswerTable], titles: list[str], path: Path) -> Path | None:
    """Draw one panel per table (titled by `titles`) into `path`; None (nothing written) when there is no table."""
    if not tables:
        return None
    from matplotlib.patches import Patch  # heavy: loaded on the first figure drawn

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
        _winner_panel(ax, table, colors, wrap(title, int(9 * (fig_width - 1.6) / ncols)))
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


def _winner_panel(ax, table: AnswerTable, colors: dict[str, str], title: str) -> None:
    """One table's grid: a cell per (N, budget) in its winner's colour, with its number and config."""
    from matplotlib.colors import to_rgb  # heavy: loaded on the first figure drawn

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
                color=ink(colors[p.variant]) if p.variant else "dimgray",
            )
    for x in range(1, len(table.lengths)):
        ax.axvline(x - 0.5, color="white", linewidth=1.5)
    for y in range(1, len(table.budgets)):
        ax.axhline(y - 0.5, color="white", linewidth=1.5)
    ax.set_xticks(range(len(table.lengths)), [format_n(n) for n in table.lengths])
    ax.set_yticks(range(len(table.budgets)), [budget_label(b, table.metric, ascii=False) for b in table.budgets])
    ax.set_xlabel("sequence length N")
    ax.set_title(title, fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


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


def draw_winner_map(a: AnalysedRun, path: Path) -> Path | None:
    """The winner map of the run's answer tables with a verdict (none when every table is refused)."""
    tables = [t for t in a.tables if not t.refusal]  # no verdict (mostly contended): no winners drawn either
    if not tables:
        return None
    one = f"{setting_title(tables[0].setting)}, inputs {tables[0].inputs}"  # one table: say all of it
    titles = table_titles(tables) if len(tables) > 1 else [one]
    on_cpu = " (CPU time)" if a.clock == "cpu" else ""  # which clock a panel's speed-ups are, on the figure itself
    return winner_map(tables, [title + on_cpu for title in titles], path)


# ---- the effective attention maps -------------------------------------------------------------------
MAPS_INPUTS_PREFERENCE = ("local", "global", "lowrank", "gaussian")  # structured inputs make the maps readable


@dataclass(frozen=True)
class MapOptions:
    """How the effective attention maps are drawn (harness.report.document.write_report's arguments)."""

    draw: bool = True  # False: no maps (they run each variant once)
    n: int = 64  # N = M = D of the maps
    inputs: str | None = None  # None: the first of MAPS_INPUTS_PREFERENCE the run measured
    fitted: bool = True  # learnable variants in the fitted state the sweep stored (RUN_DIR/fitted/); False: as built
    plugins: Sequence[str] = ()  # what the maps' child process imports (the run's plugin variants)


def map_series(frame: pd.DataFrame, inputs: str, n: int) -> list[tuple[str, str, dict]]:
    """(label, variant, config) per distinct config to draw at N = M = `n`: each series' config at its shortest ok N
    (on the maps' inputs where it ran on them), so a series matched to a budget is drawn with a window it really ran;
    configs found for several budgets are drawn once, labelled by their config. A series whose search met no budget
    is drawn at the top of the range it searched at its shortest N, labelled so ("out of budget"; "exact at this N"
    where that config sees every key of the map): its map shows what the budget missed."""
    found: dict[str, tuple[str, str, dict]] = {}
    for label, group in frame.groupby(COL.series, sort=True):
        ran = group[group[COL.status] == "ok"]
        searched = group[(group[COL.status] == "unreachable") & group[COL.tuning].map(lambda t: isinstance(t, dict))]
        pool = ran if len(ran) else searched
        if not len(pool):
            continue
        on_inputs = pool[pool[COL.inputs] == inputs]
        first = (on_inputs if len(on_inputs) else pool).sort_values(COL.seq_len).iloc[0]
        config = first[COL.config] if isinstance(first[COL.config], dict) else {}
        suffix = "" if len(ran) else _unreached_suffix(str(first[COL.variant]), config, n)
        matched = pd.notna(pd.to_numeric(first.get(COL.matched_budget), errors="coerce"))
        key = json.dumps([first[COL.variant], config], sort_keys=True, default=str)
        found.setdefault(
            key, ((config_text(first) if matched else str(label)) + suffix, str(first[COL.variant]), config)
        )
    return sorted(found.values())


def _unreached_suffix(variant: str, config: dict, n: int) -> str:
    """' (exact at this N)' for an exact-to-its-pattern variant whose knob covers every key at N (window >= N: the
    search's top config, out of budget at a longer N, is plain softmax in an N = n map); else ' (out of budget)'."""
    try:
        spec = get_variant(variant)
    except ValueError:  # a plugin registered only in the sweep's processes: nothing known of its knob here
        return " (out of budget)"
    knob = spec.quality_knob
    value = config.get(knob.field) if knob is not None else None
    covers = knob is not None and knob.at_most_length and isinstance(value, int) and value >= n
    return " (exact at this N)" if covers and spec.capabilities.exact else " (out of budget)"


def draw_maps(a: "AnalysedRun", path: Path, options: MapOptions) -> Drawn | None:
    """Each series' effective attention map (harness.report.maps) at N = options.n, with a table of the panels' errors.

    The panels run in a child process, each within the run's per-cell limit (harness.report.maps_isolated).
    """
    if not options.draw:
        return None
    frame, n = a.frame, options.n
    measured = sorted({str(v) for v in frame[COL.inputs]})
    inputs = options.inputs
    if inputs is None:
        names = {
            parse_entry(m)[0]: m for m in measured
        }  # the name only: a plugin's distribution may not be registered here
        inputs = next((names[p] for p in MAPS_INPUTS_PREFERENCE if p in names), measured[0] if measured else "gaussian")
    causal = bool(len(frame)) and not (~frame[COL.causal].astype(bool)).any()
    series = map_series(frame, inputs, n)
    run_dir = a.path if options.fitted else None
    kwargs = dict(n=n, causal=causal, run_dir=run_dir, timeout_s=a.cell_timeout_s, plugins=options.plugins)
    try:  # on gaussian inputs when the run's cannot make the N = M = D probe: a plugin's distribution not registered
        # here or a model of another shape (ValueError), a model the swap refuses while capturing (NotSupportedError)
        found = isolated_maps(series, inputs=inputs, **kwargs)
    except (ValueError, NotSupportedError):
        found = isolated_maps(series, inputs="gaussian", **kwargs)
    path = plot_attention_maps(found, path, colors=variant_colors(list(frame[COL.variant])))
    how = (
        "Learnable variants are drawn in the fitted state the sweep measured (RUN_DIR/fitted/, head 0's "
        "attention_weights); one without a stored fit says so and is not fitted again."
        if options.fitted
        else "Learnable variants are drawn as built (seeded, uncalibrated), not in the fitted state the sweep measured "
        "(RUN_DIR/fitted/): their maps show the untrained starting point."
    )
    caption = (
        f"What each variant actually applies, found by feeding v = identity at N = M = D = {n} on '{found.inputs}' inputs "
        f"(CPU, float32). {how} Each panel's 'weights rel. error' compares its matrix with the exact one."
    )
    rows = [
        [p.label, format_number(p.rel_error, ".3g") if p.weights is not None else "-", p.note or ""]
        for p in found.panels
    ]
    return Drawn(path, caption, [Table(["series", "weights rel. error", "note"], rows)])
