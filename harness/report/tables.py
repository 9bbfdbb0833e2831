"""The measured columns people read, declared once as data (header, the frame column, how a value reads), and the
tables they fill: the report's closing cell tables and the terminal summary a sweep prints.

The terminal summary (harness.report.terminal) and compare's Markdown (harness.report.compare) show their columns too.
A new metric is one Column here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from harness.report import analysis
from harness.report.render import (
    Block,
    Heading,
    Paragraph,
    Table,
    format_bytes,
    format_error,
    format_number,
    format_ratio,
    format_seconds,
    format_seconds_compact,
    short_reason,
)
from harness.store import COL

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

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


def is_noisy(r: pd.Series) -> bool:
    """Whether a row was timed noisily (its noise_reason says why); None or NaN: not timed, not noisy."""
    return r.get(COL.noisy) is True or r.get(COL.noisy) == True  # noqa: E712 - NaN/None: not noisy


def _speedup(r: pd.Series) -> str:
    """'3.1x [2.9-3.3]' where paired, '(dense oom)' where dense did not run."""
    text = format_ratio(r["dense_speedup"])
    if not np.isfinite(r["dense_speedup"]) and r.get("dense_status"):
        text = f"(dense {r['dense_status']})"
    if np.isfinite(r.get(COL.speedup_low, np.nan)) and np.isfinite(r.get(COL.speedup_high, np.nan)):
        text += f" [{format_ratio(r[COL.speedup_low])}-{format_ratio(r[COL.speedup_high])}]"
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
        COL.latency_s,
        lambda r: format_seconds(r[COL.latency_s]) + (NOISY_MARK if is_noisy(r) else ""),
        summary="latency",
        compact=lambda r: format_seconds_compact(r[COL.latency_s]),
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
    Column("peak memory", COL.peak_memory_bytes, lambda r: format_bytes(r[COL.peak_memory_bytes]), compared=True),
    Column("vs dense", "memory_ratio", lambda r: format_ratio(r["memory_ratio"]), summary="memory"),
    # bytes per second first: decode is memory-bound, its TFLOP/s say little (ANCHORS: report decode in bytes/s)
    Column("GB/s", COL.bytes_per_s, lambda r: format_number(_scaled(r.get(COL.bytes_per_s), 1e9), ".3g")),
    Column("% bandwidth", COL.pct_of_bandwidth, lambda r: format_number(r.get(COL.pct_of_bandwidth), ".3g", "%")),
    Column("TFLOP/s", COL.tflops, lambda r: format_number(r[COL.tflops], ".3g")),
    Column("% peak", COL.pct_of_compute_peak, lambda r: format_number(r.get(COL.pct_of_compute_peak), ".3g", "%")),
    Column(
        "rel. error",
        COL.rel_l2_error,
        lambda r: format_error(r[COL.rel_l2_error], digits=2),
        summary="rel err",
        compact=lambda r: format_error(r[COL.rel_l2_error]),
        compared=True,
    ),
    Column("1 - cosine", COL.cosine, lambda r: format_error(_one_minus(r.get(COL.cosine)), digits=2)),
    # the attention-weight metric on the same rows (harness.measure.weights): recall of the exact top-8 keys
    Column("top-8 recall", COL.topk_recall, lambda r: format_number(r.get(COL.topk_recall), ".2f")),
    # the trivial answers' errors on the same inputs and rows (harness.measure.reference.baseline_errors)
    Column(
        "uniform / zero error",
        COL.uniform_rel_l2_error,
        lambda r: (
            f"{format_number(r.get(COL.uniform_rel_l2_error), '.2f')} / {format_number(r.get(COL.zero_rel_l2_error), '.2f')}"
        ),
    ),
    Column("fit error train / held-out", COL.calibration_heldout_error, lambda r: _fit_gap(r)),
    # a layer train cell's weight gradients against float64 (harness.measure.layer_accuracy): autocast's cost
    Column(
        "weights' grad error", COL.grad_rel_l2_params, lambda r: format_error(r.get(COL.grad_rel_l2_params), digits=2)
    ),
)


def _fit_gap(r: pd.Series) -> str:
    """A learnable variant's calibration error on its training seeds and on held-out seeds: '0.74 / 0.84'; '' if unfitted."""
    train, held = r.get(COL.calibration_train_error), r.get(COL.calibration_heldout_error)
    if not isinstance(held, (int, float)) or not np.isfinite(held):
        return ""
    return f"{format_error(train, digits=2)} / {format_error(held, digits=2)}"


# ---- the report's cell tables ------------------------------------------------------------------------
NOISY_FOOTNOTE = (
    f"{NOISY_MARK} timed under load or noisily (the row's noise_reason says why): its latency and speed-up "
    "may be the machine's, not the variant's; docs/timing.md says how to get quiet numbers."
)
HEADERS = ["series", "N", "status", *(c.header for c in COLUMNS), "reason"]


def cell_tables(analysed: "AnalysedRun") -> list[Block]:
    """One table per setting and input distribution; a device column when the run spans several devices."""
    frame = analysed.frame
    blocks: list[Block] = [
        Heading(2, "Tables"),
        Paragraph(
            "Every cell of the run, per setting and input distribution. Speed-up and memory ratio are against the dense "
            "baseline of the same cell; a speed-up timed in alternation with dense inside the cell shows its 95% interval "
            f"in brackets. Errors are against {analysed.errors_against}. A failed cell shows its status and reason."
        ),
    ]
    mixed = frame[COL.device_name].nunique() > 1  # several devices: name each cell's
    for setting in analysis.settings(frame):
        part = analysis.select(frame, setting)
        for dist in sorted({str(v) for v in part[COL.inputs]}):
            sub = part[part[COL.inputs] == dist].sort_values([COL.series, COL.seq_len])
            rows = [cell_row(r) + ([str(r[COL.device_name])] if mixed else []) for _, r in sub.iterrows()]
            blocks += [
                Heading(3, f"{analysis.setting_title(setting)}, inputs {dist}"),
                Table(HEADERS + (["device"] if mixed else []), rows),
            ]
    if (frame[COL.status].eq("ok") & frame[COL.noisy].eq(True)).any():
        blocks.append(Paragraph(NOISY_FOOTNOTE))
    return blocks


def cell_row(r: pd.Series) -> list[str]:
    """One cell's line: numbers when it ran, its status and reason when not (OOM in capitals, to stand out)."""
    if r[COL.status] != "ok":
        status = "OOM" if r[COL.status] == "oom" else str(r[COL.status])
        return [str(r[COL.series]), str(r[COL.seq_len]), status] + ["-"] * len(COLUMNS) + [short_reason(r[COL.reason])]
    impossible = r.get(COL.impossible)
    if isinstance(impossible, str):  # above the machine's measured limits: shown, flagged, never a winner
        return [str(r[COL.series]), str(r[COL.seq_len]), "IMPOSSIBLE"] + [c.text(r) for c in COLUMNS] + [impossible]
    return [str(r[COL.series]), str(r[COL.seq_len]), str(r[COL.status])] + [c.text(r) for c in COLUMNS] + [""]
