"""The report's layer section: attention's share of a transformer block (the decode figures are in harness.report.figures)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.schema import BASELINE
from harness.report import analysis
from harness.report.render import (
    format_n,
    format_number,
    format_ratio,
    format_seconds,
    Block,
    Heading,
    Paragraph,
    Table,
)

BLOCK_KEYS = tuple(k for k in analysis.SETTING_KEYS if k != "scope")  # a setting, both scopes together


def layer_share(frame: pd.DataFrame) -> list[Block]:
    """Per setting and N: dense attention / dense layer latency, and each variant's attention and layer speed-ups.

    Only where both scopes ran (ok rows of the primary input distribution); [] otherwise.
    """
    inputs = analysis.primary_inputs(frame)
    ok = frame[(frame["status"] == "ok") & (frame["inputs"] == inputs)] if len(frame) else frame
    if not len(ok) or set(ok["scope"]) < {"attention", "layer"}:
        return []
    blocks: list[Block] = []
    for key, setting in ok.groupby(list(BLOCK_KEYS), dropna=False, sort=True):
        if set(setting["scope"]) < {"attention", "layer"}:
            continue
        table = _share_table(setting)
        if table is not None:
            title = analysis.setting_title(dict(zip(BLOCK_KEYS, key)))
            blocks += [Heading(3, title), table]
    if not blocks:
        return []
    intro = Paragraph(
        "A layer cell times a pre-norm transformer block (RMSNorm, Q/K/V projections, the attention, the output "
        "projection, a SwiGLU MLP of ~2.7x width, residuals). **attention share** is dense attention's latency over the "
        f"dense block's at the same N; beside each variant, its speed-up of attention alone and of the whole layer (inputs: {inputs}), "
        "then the layer's error: the stack's output against the same stack in float64 with exact attention, in the "
        "run's metric. A series matched to a budget (name@budget) was searched on attention alone, so its layer error "
        "can exceed that budget. Layer cells are timed alone, not paired with dense: their speed-up is the ratio of "
        "the two medians, which a busy machine can bias (docs/timing.md)."
    )
    return [Heading(2, "Attention inside a layer"), intro] + blocks


def _share_table(setting: pd.DataFrame) -> Table | None:
    def at(scope: str) -> pd.DataFrame:
        return setting[setting["scope"] == scope]

    dense = {
        s: at(s)[at(s)["variant"] == BASELINE].groupby("seq_len")["latency_s"].median() for s in ("attention", "layer")
    }
    lengths = sorted(set(dense["attention"].index) & set(dense["layer"].index))
    if not lengths:
        return None
    series = sorted(set(setting.loc[setting["variant"] != BASELINE, "series"]))
    speed = {s: at(s).groupby(["series", "seq_len"])["dense_speedup"].median() for s in ("attention", "layer")}
    errors = at("layer").groupby(["series", "seq_len"])["error"].median() if "error" in setting else pd.Series()
    headers = ["N", "dense attention", "dense layer", "attention share"] + [
        f"{name} (attention / layer; layer error)" for name in series
    ]
    rows = []
    for n in lengths:
        attention, layer = dense["attention"][n], dense["layer"][n]
        line = [format_n(n), format_seconds(attention), format_seconds(layer), f"{100 * attention / layer:.0f}%"]
        for name in series:
            error = errors.get((name, n), np.nan)
            line.append(
                f"{format_ratio(speed['attention'].get((name, n), np.nan))} / {format_ratio(speed['layer'].get((name, n), np.nan))}"
                f"; {format_number(error, '.2g')}"
            )
        rows.append(line)
    return Table(headers, rows)
