"""The report's layer and decode sections: attention's share of a transformer block, and the decode figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.report import analysis, plots
from harness.report.formatting import format_n, format_ratio, format_seconds
from harness.report.page import Block, Heading, Image, Paragraph, Table

DECODE_FIGURE_FILES = {"decode_latency": "decode_latency_vs_n.png", "state_bytes": "state_bytes_vs_n.png"}  # only with decode rows
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
        f"dense block's at the same N; beside each variant, its speed-up of attention alone and of the whole layer (inputs: {inputs})."
    )
    return [Heading(2, "Attention inside a layer"), intro] + blocks


def _share_table(setting: pd.DataFrame) -> Table | None:
    def at(scope: str) -> pd.DataFrame:
        return setting[setting["scope"] == scope]

    dense = {s: at(s)[at(s)["variant"] == analysis.BASELINE].groupby("seq_len")["latency_s"].median() for s in ("attention", "layer")}
    lengths = sorted(set(dense["attention"].index) & set(dense["layer"].index))
    if not lengths:
        return None
    series = sorted(set(setting.loc[setting["variant"] != analysis.BASELINE, "series"]))
    speed = {s: at(s).groupby(["series", "seq_len"])["speedup"].median() for s in ("attention", "layer")}
    headers = ["N", "dense attention", "dense layer", "attention share"] + [f"{name} (attention / layer)" for name in series]
    rows = []
    for n in lengths:
        attention, layer = dense["attention"][n], dense["layer"][n]
        line = [format_n(n), format_seconds(attention), format_seconds(layer), f"{100 * attention / layer:.0f}%"]
        for name in series:
            line.append(f"{format_ratio(speed['attention'].get((name, n), np.nan))} / {format_ratio(speed['layer'].get((name, n), np.nan))}")
        rows.append(line)
    return Table(headers, rows)


def decode_figures(frame: pd.DataFrame, folder: Path) -> tuple[list[Path], list[Block]]:
    """Per-token latency vs N and decode-state bytes vs N, when the run has decode rows; ([], []) otherwise."""
    decode = frame[frame["phase"] == "decode"] if len(frame) else frame
    if not len(decode) or not (decode["status"] == "ok").any():
        return [], []
    made = [
        (plots.plot_metric_vs_n(decode, "latency_s", folder / DECODE_FIGURE_FILES["decode_latency"], ylabel="time per generated token",
                                title="Decode: per-token latency vs context N", seconds_axis=True),
         "Seconds per generated token (median over timed generations, each from a fresh state) against the context length N."),
        (plots.plot_metric_vs_n(decode, "state_bytes", folder / DECODE_FIGURE_FILES["state_bytes"], ylabel="decode state",
                                title="Decode: state bytes vs context N", bytes_axis=True),
         "Bytes held by the decode state right after the N-token context: a KV cache grows with N, a window or a "
         "linear-attention state does not."),
    ]
    paths = [p for p, _ in made if p is not None]
    return paths, [Heading(2, "Decoding")] + [Image(p.name, caption) for p, caption in made if p is not None]
