"""Every figure of the report declared once, as data: its file, the section it belongs to, how it is drawn, its
caption and when it is drawn (FIGURES); `figure_section` draws a section's figures into the run folder.

The drawings are by job: curves against N (harness.report.curves), trade-offs (tradeoffs: Pareto, roofline), lengths
(lengths: max_length, longest trainable N) and heatmaps (heatmaps: the winner map, the effective attention maps)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

from harness.error_metrics import METRIC_NAMES
from harness.measure.distribution import FIRST_TOKENS, WINDOWS
from harness.report import analysis, curves, distributions, heatmaps, lengths, tradeoffs
from harness.report.analysis import budget_text
from harness.report.heatmaps import MapOptions
from harness.report.plotting import Drawn
from harness.report.render import Block, Image
from harness.store import COL

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

OUTSIDE_CAPTION = (
    "Faded dotted lines, labelled '(outside every budget)': series none of whose cells on these inputs is within "
    "the largest error budget; drawn for honesty, never a candidate."
)
FAILURE_CAPTION = (
    "At the top of a panel: x where a series ran out of memory, | where it timed out; a series with no point in a "
    "panel is named under its title with its status. A matched series whose knob differs per N is drawn as points "
    "labelled with the knob, not a line. "
)


@dataclass(frozen=True)
class Figure:
    """One PNG of the report."""

    file: str  # a stable name, so README can link a committed run's figures
    section: str  # "answer" | "measured" | "memory" | "decode" | "distributions" | "maps"
    draw: Callable[["AnalysedRun", Path, MapOptions], "Path | Drawn | None"]  # None: nothing to draw (no file)
    caption: Callable[["AnalysedRun"], str]
    when: Callable[["AnalysedRun"], bool] = lambda analysed: True  # drawn at all (e.g. only with decode rows)


def figure_section(
    analysed: "AnalysedRun", folder: Path, section: str, options: MapOptions = MapOptions()
) -> tuple[list[Path], list[Block]]:
    """Draw the figures of one section into `folder`: (the PNGs written, an Image block per figure, with what follows it)."""
    paths, blocks = [], []
    for figure in FIGURES:
        if figure.section != section or not figure.when(analysed):
            continue
        drawn = figure.draw(analysed, folder / figure.file, options)
        if drawn is None:
            continue
        drawn = drawn if isinstance(drawn, Drawn) else Drawn(drawn)
        paths.append(drawn.path)
        blocks += [Image(drawn.path.name, drawn.caption or figure.caption(analysed))] + drawn.after
    return paths, blocks


def _sentence(text: str) -> str:
    """The text with a capital first letter and the rest as written ('Relative L2 error', not str.capitalize's 'l2')."""
    return text[:1].upper() + text[1:]


def _budget_list(a: "AnalysedRun") -> str:
    return ", ".join(budget_text(b, a.metric) for b in a.budgets)


def _decode(a: "AnalysedRun") -> pd.DataFrame:
    return a.frame[a.frame[COL.phase] == "decode"] if len(a.frame) else a.frame


def _decoded(a: "AnalysedRun") -> bool:
    """Whether a decode cell ran: the decode figures are drawn only then."""
    return bool((_decode(a)[COL.status] == "ok").any())


def _winner_caption(a: "AnalysedRun") -> str:
    empty = any(p.label is None for t in a.tables for p in t.picks.values())
    return "The winner per N and error budget: its speed-up over dense (~ a tie) and config" + (
        "; grey: none within budget ran." if empty else "."
    )


FIGURES: tuple[Figure, ...] = (
    Figure("winner_map.png", "answer", lambda a, path, _: heatmaps.draw_winner_map(a, path), _winner_caption),
    Figure(
        "latency_vs_n.png",
        "measured",
        lambda a, path, _: curves.plot_metric_vs_n(
            a.frame,
            "latency_s",
            path,
            ylabel="time per call (median)",
            title="Latency vs N",
            seconds_axis=True,
            band=("latency_p20_s", "latency_p80_s"),
        ),
        lambda a: (
            "Latency (median of the repeats) against N, log-log; the shaded band spans the 20th to 80th percentile of "
            "the repeats. " + FAILURE_CAPTION + OUTSIDE_CAPTION
        ),
    ),
    Figure(
        "memory_vs_n.png",
        "measured",
        lambda a, path, _: curves.plot_metric_vs_n(
            a.frame,
            "peak_memory_bytes",
            path,
            ylabel="peak memory beyond the inputs",
            title="Peak memory vs N",
            bytes_axis=True,
        ),
        lambda a: "Peak memory beyond the inputs against N, log-log. " + FAILURE_CAPTION + OUTSIDE_CAPTION,
    ),
    Figure(
        "speedup_vs_n.png",
        "measured",
        lambda a, path, _: curves.plot_metric_vs_n(
            a.frame,
            "dense_speedup",
            path,
            ylabel="speed-up over dense (x)",
            title="Speed-up over dense vs N",
            hline=1.0,
            ratio_axis=True,
        ),
        lambda a: (
            "Dense latency divided by the variant's at the same cell (paired in alternation inside the cell where the "
            "row was; else the ratio of the two medians); above the dashed line is faster than dense. The dense "
            "baseline is the dense row whose config asks for backend 'auto', else the fastest dense row. "
            + FAILURE_CAPTION
            + OUTSIDE_CAPTION
        ),
    ),
    Figure(
        "error_vs_n.png",
        "measured",
        lambda a, path, _: curves.plot_error_vs_n(
            a.frame, path, budgets=a.budgets, metric=a.metric, against=a.errors_against
        ),
        lambda a: (
            f"The output's {METRIC_NAMES[a.metric]} against {a.errors_against}, per input distribution; dashed "
            f"lines: the error budgets ({_budget_list(a)}). Hollow dotted points: a budget no knob value met, at the "
            "best error its search scored on its own seeds. " + OUTSIDE_CAPTION
        ),
    ),
    Figure(
        "pareto.png",
        "measured",
        lambda a, path, _: tradeoffs.plot_pareto(a.frame, path, budgets=a.budgets, metric=a.metric),
        lambda a: (
            f"{_sentence(METRIC_NAMES[a.metric])} (against {a.errors_against}) against latency at each N (one row "
            f"of panels per setting), on the '{analysis.primary_inputs(a.frame)}' inputs (the other distributions' "
            "errors are in error_vs_n.png). Filled points are within the largest budget; the Pareto front (outlined "
            "and joined) is computed over those only, so a fast but inaccurate series is never on it. Hollow points "
            f"are outside every budget. Dashed lines: the budgets ({_budget_list(a)})."
        ),
    ),
    Figure(
        "roofline.png",
        "measured",
        lambda a, path, _: tradeoffs.plot_roofline(a.frame, a.run.env, path),
        lambda a: (
            "Every ok row's arithmetic intensity (the FLOPs its backend executes per byte it must move: inputs, output "
            "and a decode state) against the FLOP/s it achieved, log-log, under the ceilings measured on this machine "
            "at the sweep's start (grey: min(matmul peak, copy bandwidth x intensity); dashed for a low-precision "
            "dtype). Filled circles: prefill; hollow triangles: decode (memory-bound, far left). A red cross marks a "
            "row above a ceiling: impossible, never a winner. A working set that fits in the cache may sit above the "
            "bandwidth slope."
        ),
        when=lambda a: tradeoffs.has_roofline(a.frame, a.run.env),
    ),
    Figure(
        "max_length.png",
        "measured",
        lambda a, path, _: lengths.plot_memory_limits(lengths.memory_limits(a.frame), a.frame, path),
        lambda a: (
            "The longest N each series ran, and the first N where it ran out of memory or timed out (drawn only when "
            "some cell did)."
        ),
    ),
    Figure(
        "decode_latency_vs_n.png",
        "decode",
        lambda a, path, _: curves.plot_metric_vs_n(
            _decode(a),
            "latency_s",
            path,
            ylabel="time per generated token",
            title="Decode: per-token latency vs context N",
            seconds_axis=True,
        ),
        lambda a: (
            "Seconds per generated token (median over timed generations, each from a fresh state) against the "
            "context length N. " + FAILURE_CAPTION
        ),
        when=_decoded,
    ),
    Figure(
        "state_bytes_vs_n.png",
        "decode",
        lambda a, path, _: curves.plot_metric_vs_n(
            _decode(a),
            "state_bytes",
            path,
            ylabel="decode state",
            title="Decode: state bytes vs context N",
            bytes_axis=True,
        ),
        lambda a: (
            "Bytes held by the decode state right after the N-token context: a KV cache grows with N, a window or a "
            "linear-attention state does not. " + FAILURE_CAPTION
        ),
        when=_decoded,
    ),
    Figure(
        "longest_trainable_n.png",
        "memory",
        lambda a, path, _: lengths.plot_longest(a.longest, a.memory_budget, path),
        lambda a: (
            "Longest trainable N: per train series (variant and config, recompute, precision), the longest N whose "
            "measured peak memory of one forward + backward fits the memory budget, found by doubling N from the "
            "requested lengths, then bisection to within an eighth; the label gives the time per token at that N. "
            "Colour: recompute; hatched: autocast."
        ),
        when=lambda a: a.longest is not None,
    ),
    Figure(
        "distributions.png",
        "distributions",
        lambda a, path, _: distributions.plot_distributions(a.run.distributions, path),
        lambda a: (
            "Each head of the exact attention on the inputs, at the longest N of each input distribution (one batch "
            "row's head is one head: `llm` draws head types per batch row), on the query rows the accuracy check "
            "samples: its entropy as a bar, heads sorted by it and coloured by kind; dashed: the entropy of uniform "
            "attention on the same rows (log M, a causal row's log(i + 1)). Points (right axis): the head's mass on "
            f"the first {FIRST_TOKENS} tokens and within {WINDOWS[0]} tokens of the query."
        ),
        when=lambda a: bool(a.run.distributions),
    ),
    Figure(
        "attention_maps.png",
        "maps",
        lambda a, path, options: heatmaps.draw_maps(a, path, options),
        lambda a: "",
        when=lambda a: bool(len(a.frame)),
    ),
)
