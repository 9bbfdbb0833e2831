"""The measured columns people read, declared once as data: header, the frame column, how a value reads.

They drive the report's cell tables (harness.report.cells), the terminal summary (harness.report.summary) and
compare's Markdown (harness.report.compare_output). A new metric is one Column here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from harness.report.render import (
    format_bytes,
    format_error,
    format_number,
    format_ratio,
    format_seconds,
    format_seconds_compact,
)

NOISY_MARK = "†"


@dataclass(frozen=True)
class Column:
    """One measured column of a row (a frame with dense ratios: harness.report.analysed)."""

    header: str  # in the report's tables and compare.md
    field: str  # the frame column it reads
    text: Callable[[pd.Series], str]  # an ok row -> its text in the report
    summary: str | None = None  # its name in the terminal summary (None: not there)
    compact: Callable[[pd.Series], str] | None = None  # its text in the terminal summary (None: `text`)
    compared: bool = False  # compare.md shows A's and B's side by side


def _noisy(r: pd.Series) -> bool:
    return r.get("noisy") is True or r.get("noisy") == True  # noqa: E712 - NaN/None: not noisy


def _speedup(r: pd.Series) -> str:
    """'3.1x [2.9-3.3]' where paired, '(dense oom)' where dense did not run."""
    text = format_ratio(r["dense_speedup"])
    if not np.isfinite(r["dense_speedup"]) and r.get("dense_status"):
        text = f"(dense {r['dense_status']})"
    if np.isfinite(r.get("speedup_low", np.nan)) and np.isfinite(r.get("speedup_high", np.nan)):
        text += f" [{format_ratio(r['speedup_low'])}-{format_ratio(r['speedup_high'])}]"
    return text


def _scaled(value, scale: float) -> float | None:
    """value / scale, None when missing (older runs have no such column)."""
    return value / scale if isinstance(value, (int, float)) and np.isfinite(value) else None


def _one_minus(cosine) -> float | None:
    """1 - cosine similarity, the error beside relative L2 (a cosine of 0.9999998 would print as 1.00); None if unmeasured."""
    return 1.0 - cosine if isinstance(cosine, (int, float)) and np.isfinite(cosine) else None


COLUMNS: tuple[Column, ...] = (
    Column(
        "latency",
        "latency_s",
        lambda r: format_seconds(r["latency_s"]) + (NOISY_MARK if _noisy(r) else ""),
        summary="latency",
        compact=lambda r: format_seconds_compact(r["latency_s"]),
        compared=True,
    ),
    Column(
        "speed-up",
        "dense_speedup",
        _speedup,
        summary="speed-up",
        compact=lambda r: format_ratio(r["dense_speedup"]),
        compared=True,
    ),
    Column("peak memory", "peak_memory_bytes", lambda r: format_bytes(r["peak_memory_bytes"]), compared=True),
    Column("vs dense", "memory_ratio", lambda r: format_ratio(r["memory_ratio"]), summary="memory"),
    # bytes per second first: decode is memory-bound, its TFLOP/s say little (ANCHORS: report decode in bytes/s)
    Column("GB/s", "bytes_per_s", lambda r: format_number(_scaled(r.get("bytes_per_s"), 1e9), ".3g")),
    Column("% bandwidth", "pct_of_bandwidth", lambda r: format_number(r.get("pct_of_bandwidth"), ".3g", "%")),
    Column("TFLOP/s", "tflops", lambda r: format_number(r["tflops"], ".3g")),
    Column("% peak", "pct_of_compute_peak", lambda r: format_number(r.get("pct_of_compute_peak"), ".3g", "%")),
    Column(
        "rel. error",
        "rel_l2_error",
        lambda r: format_error(r["rel_l2_error"], digits=2),
        summary="rel err",
        compact=lambda r: format_error(r["rel_l2_error"]),
        compared=True,
    ),
    Column("1 - cosine", "cosine", lambda r: format_error(_one_minus(r.get("cosine")), digits=2)),
    # the attention-weight metric on the same rows (harness.measure.weights): recall of the exact top-8 keys
    Column("top-8 recall", "topk_recall", lambda r: format_number(r.get("topk_recall"), ".2f")),
    # the trivial answers' errors on the same inputs and rows (harness.measure.accuracy.baseline_errors)
    Column(
        "uniform / zero error",
        "uniform_rel_l2_error",
        lambda r: (
            f"{format_number(r.get('uniform_rel_l2_error'), '.2f')} / {format_number(r.get('zero_rel_l2_error'), '.2f')}"
        ),
    ),
    Column("fit error train / held-out", "calibration_heldout_error", lambda r: _fit_gap(r)),
    # a layer train cell's weight gradients against float64 (harness.measure.layer_accuracy): autocast's cost
    Column("weights' grad error", "grad_rel_l2_params", lambda r: format_error(r.get("grad_rel_l2_params"), digits=2)),
)


def _fit_gap(r: pd.Series) -> str:
    """A learnable variant's calibration error on its training seeds and on held-out seeds: '0.74 / 0.84'; '' if unfitted."""
    train, held = r.get("calibration_train_error"), r.get("calibration_heldout_error")
    if not isinstance(held, (int, float)) or not np.isfinite(held):
        return ""
    return f"{format_error(train, digits=2)} / {format_error(held, digits=2)}"
