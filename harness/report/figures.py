"""The report's figure sections: the six measured figures, and the effective attention maps (which run each variant once)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from harness.entries import parse_entry
from harness.report import analysis, plots
from harness.report.budgets import METRIC_NAMES, budget_text, budgets_of
from harness.report.formatting import format_number
from harness.report.maps_isolated import isolated_maps
from harness.report.page import Block, Heading, Image, Table
from harness.report.plotting import FIGURE_FILES, variant_colors

OUTSIDE_CAPTION = ("Faded dotted lines, labelled '(outside every budget)': series none of whose cells on these inputs is within "
                   "the largest error budget; drawn for honesty, never a candidate.")
MAPS_INPUTS_PREFERENCE = ("local", "global", "lowrank", "gaussian")  # structured inputs make the maps readable


def figures(frame: pd.DataFrame, folder: Path) -> tuple[list[Path], list[Block]]:
    """Draw the measured figures into `folder`; returns (the PNGs written, the section).

    The error budgets and metric are frame's (budgets.with_budgets; the defaults when it was not called).
    """
    budgets, metric = budgets_of(frame)
    budget_list = ", ".join(budget_text(b, metric) for b in budgets)
    made = [
        (plots.plot_metric_vs_n(frame, "latency_s", folder / FIGURE_FILES["latency"], ylabel="time per call (median)", title="Latency vs N",
                                seconds_axis=True, band=("latency_p20_s", "latency_p80_s")),
         "Latency (median of the repeats) against N, log-log; the shaded band spans the 20th to 80th percentile of the "
         "repeats. Crosses: out of memory. " + OUTSIDE_CAPTION),
        (plots.plot_metric_vs_n(frame, "peak_memory_bytes", folder / FIGURE_FILES["memory"], ylabel="peak memory beyond the inputs",
                                title="Peak memory vs N", bytes_axis=True),
         "Peak memory beyond the inputs against N, log-log. Crosses: out of memory. " + OUTSIDE_CAPTION),
        (plots.plot_metric_vs_n(frame, "speedup", folder / FIGURE_FILES["speedup"], ylabel="speed-up over dense (x)",
                                title="Speed-up over dense vs N", hline=1.0, ratio_axis=True),
         "Dense latency divided by the variant's at the same cell; above the dashed line is faster than dense. "
         "The dense baseline is the dense row whose config asks for backend 'auto', else the fastest dense row. " + OUTSIDE_CAPTION),
        (plots.plot_error_vs_n(frame, folder / FIGURE_FILES["error"]),
         f"The output's {METRIC_NAMES[metric]} against exact float64 attention, per input distribution; dashed lines: "
         f"the error budgets ({budget_list}). " + OUTSIDE_CAPTION),
        (plots.plot_pareto(frame, folder / FIGURE_FILES["pareto"]),
         f"{METRIC_NAMES[metric].capitalize()} against latency at each N (one row of panels per setting), on the "
         f"'{analysis.primary_inputs(frame)}' inputs (the other distributions' errors are in {FIGURE_FILES['error']}). "
         "Filled points are within the largest budget; the Pareto front (outlined and joined) is computed over those "
         "only, so a fast but inaccurate series is never on it. Hollow points are outside every budget. Dashed lines: "
         f"the budgets ({budget_list})."),
        (plots.plot_memory_limits(analysis.memory_limits(frame), frame, folder / FIGURE_FILES["limits"]),
         "The longest N each series ran, and the first N where it ran out of memory or timed out (drawn only when some cell did)."),
    ]
    paths = [p for p, _ in made if p is not None]
    blocks: list[Block] = [Heading(2, "Figures")]
    blocks += [Image(p.name, caption) for p, caption in made if p is not None]
    return paths, blocks


def _map_series(frame: pd.DataFrame, inputs: str) -> list[tuple[str, str, dict]]:
    """(label, variant, config) per distinct config to draw: each series' config at its shortest ok N (on the maps'
    inputs where it ran on them), so a series matched to a budget is drawn with a window it really ran; configs found
    for several budgets are drawn once, labelled by their config. A series whose search met no budget is drawn at
    the top of the range it searched at its shortest N, labelled so: its map shows what the budget missed."""
    from harness.report.choice import config_text

    found: dict[str, tuple[str, str, dict]] = {}
    for label, group in frame.groupby("series", sort=True):
        ran = group[group["status"] == "ok"]
        searched = group[(group["status"] == "unreachable") & group["tuning"].map(lambda t: isinstance(t, dict))]
        pool, suffix = (ran, "") if len(ran) else (searched, " (out of budget)")
        if not len(pool):
            continue
        on_inputs = pool[pool["inputs"] == inputs]
        first = (on_inputs if len(on_inputs) else pool).sort_values("seq_len").iloc[0]
        config = first["config"] if isinstance(first["config"], dict) else {}
        matched = pd.notna(pd.to_numeric(first.get("matched_budget"), errors="coerce"))
        key = json.dumps([first["variant"], config], sort_keys=True, default=str)
        found.setdefault(key, ((config_text(first) if matched else str(label)) + suffix, str(first["variant"]), config))
    return sorted(found.values())


def maps(frame: pd.DataFrame, folder: Path, *, n: int, inputs: str | None, calibrate: bool, timeout_s: float | None = None,
         plugins: Sequence[str] = ()) -> tuple[list[Path], list[Block]]:
    """Draw each series' effective attention map (harness.report.maps) at N = n; returns (the PNG, the section).

    `inputs` None picks the first of MAPS_INPUTS_PREFERENCE the run measured. The panels run in a
    child process, each within `timeout_s` (harness.report.maps_isolated).
    """
    measured = sorted({str(v) for v in frame["inputs"]})
    if inputs is None:
        names = {parse_entry(m)[0]: m for m in measured}  # the name only: a plugin's distribution may not be registered here
        inputs = next((names[p] for p in MAPS_INPUTS_PREFERENCE if p in names), measured[0] if measured else "gaussian")
    causal = bool(len(frame)) and not (~frame["causal"].astype(bool)).any()
    series = _map_series(frame, inputs)
    options = dict(n=n, causal=causal, calibrate=calibrate, timeout_s=timeout_s, plugins=plugins)
    try:
        found = isolated_maps(series, inputs=inputs, **options)
    except ValueError:  # e.g. a plugin input distribution not registered here: draw on gaussian inputs
        found = isolated_maps(series, inputs="gaussian", **options)
    path = plots.plot_attention_maps(found, folder / FIGURE_FILES["maps"], colors=variant_colors(list(frame["variant"])))
    how = ("Learnable variants are fitted at this N with the calibration defaults (other seeds of the same distribution)."
           if calibrate else
           "Learnable variants are drawn as built (seeded, uncalibrated): the run does not store fitted states, so their "
           "maps show the untrained starting point, not what the sweep measured after calibration.")
    caption = (f"What each variant actually applies, found by feeding v = identity at N = M = D = {n} on '{found.inputs}' inputs "
               f"(CPU, float32). {how} Each panel's 'weights rel. error' compares its matrix with the exact one.")
    rows = [[p.label, format_number(p.rel_error, ".3g") if p.weights is not None else "-", p.note or ""] for p in found.panels]
    blocks: list[Block] = [Heading(2, "Effective attention maps"), Image(path.name, caption),
                           Table(["series", "weights rel. error", "note"], rows)]
    return [path], blocks
