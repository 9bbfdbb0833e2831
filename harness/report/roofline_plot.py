"""The roofline figure: every ok row's arithmetic intensity (executed FLOPs per byte it must move) against the FLOP/s
it achieved, under the machine's measured ceilings (env.json "limits": harness.measure.limits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.report.plotting import DPI, pyplot, save, variant_colors

PHASE_MARKERS = {"prefill": "o", "decode": "^"}  # decode hollow, prefill filled


def roofline_points(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok rows with what the figure needs: intensity (FLOP/byte) and achieved executed FLOP/s."""
    need = ("flops", "bytes_moved", "latency_s")
    if not len(frame) or any(c not in frame for c in need):
        return frame.iloc[0:0]
    ok = frame[frame["status"] == "ok"].copy()
    for c in need:
        ok[c] = pd.to_numeric(ok[c], errors="coerce")
    ok = ok[(ok["flops"] > 0) & (ok["bytes_moved"] > 0) & (ok["latency_s"] > 0)]
    ok["intensity"] = ok["flops"] / ok["bytes_moved"]
    ok["achieved"] = ok["flops"] / ok["latency_s"]
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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    lo = min(points["intensity"].min(), 0.1) / 2
    hi = max(points["intensity"].max(), 100.0) * 2
    x = np.geomspace(lo, hi, 200)
    bandwidth = None
    for dtype, entry in sorted(limits["dtypes"].items()):
        if dtype not in set(points["dtype"]) and dtype != "float32":
            continue
        peak, bandwidth = entry.get("ceiling_flops") or entry.get("peak_flops"), entry.get("bandwidth_bytes_per_s")
        if peak and bandwidth:
            ax.plot(x, np.minimum(peak, bandwidth * x), color="grey", lw=1.5, ls="-" if dtype == "float32" else "--")
            ax.annotate(f"{dtype} peak {peak / 1e9:.3g} GFLOP/s", (hi, peak), ha="right", va="bottom", fontsize=8)
    if bandwidth:
        ax.annotate(f"bandwidth {bandwidth / 1e9:.3g} GB/s", (lo * 1.5, bandwidth * lo * 3), fontsize=8)
    colors = variant_colors(list(points["variant"]))
    for (variant, phase), part in points.groupby(["variant", "phase"], sort=True):
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
    if "impossible" in points:
        flagged = points[points["impossible"].notna()]
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
    fig.set_dpi(DPI)
    save(plt, fig, path)
    return path
