"""The report's closing tables: every cell of the run, per setting and input distribution, failures with their reason."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report import analysis
from harness.report.formatting import format_bytes, format_error, format_number, format_ratio, format_seconds, short_reason
from harness.report.page import Block, Heading, Paragraph, Table

NOISY_MARK = "†"
NOISY_FOOTNOTE = (f"{NOISY_MARK} timed under load or noisily (the row's noise_reason says why): its latency and speed-up "
                  "may be the machine's, not the variant's; docs/timing.md says how to get quiet numbers.")
HEADERS = ["series", "N", "status", "latency", "speed-up", "peak memory", "vs dense", "TFLOP/s", "rel. error", "1 - cosine", "reason"]


def cell_tables(frame: pd.DataFrame) -> list[Block]:
    """One table per setting and input distribution; a device column when the run spans several devices."""
    blocks: list[Block] = [Heading(2, "Tables"), Paragraph(
        "Every cell of the run, per setting and input distribution. Speed-up and memory ratio are against the dense "
        "baseline of the same cell; a speed-up timed in alternation with dense inside the cell shows its 95% interval "
        "in brackets. A failed cell shows its status and reason.")]
    mixed = frame["device_name"].nunique() > 1  # several devices: name each cell's
    for setting in analysis.settings(frame):
        part = analysis.select(frame, setting)
        for dist in sorted({str(v) for v in part["inputs"]}):
            sub = part[part["inputs"] == dist].sort_values(["series", "seq_len"])
            rows = [cell_row(r) + ([str(r["device_name"])] if mixed else []) for _, r in sub.iterrows()]
            blocks += [Heading(3, f"{analysis.setting_title(setting)}, inputs {dist}"),
                       Table(HEADERS + (["device"] if mixed else []), rows)]
    if (frame["status"].eq("ok") & frame["noisy"].eq(True)).any():
        blocks.append(Paragraph(NOISY_FOOTNOTE))
    return blocks


def cell_row(r: pd.Series) -> list[str]:
    """One cell's line: numbers when it ran, its status and reason when not (OOM in capitals, to stand out)."""
    if r["status"] != "ok":
        status = "OOM" if r["status"] == "oom" else str(r["status"])
        return [str(r["series"]), str(r["seq_len"]), status] + ["-"] * 7 + [short_reason(r["reason"])]
    speed = format_ratio(r["speedup"])
    if not np.isfinite(r["speedup"]) and r.get("dense_status"):
        speed = f"(dense {r['dense_status']})"
    if np.isfinite(r.get("speedup_low", np.nan)) and np.isfinite(r.get("speedup_high", np.nan)):
        speed += f" [{format_ratio(r['speedup_low'])}-{format_ratio(r['speedup_high'])}]"
    mark = NOISY_MARK if r.get("noisy") is True or r.get("noisy") == True else ""  # noqa: E712 - NaN/None: not noisy
    return [
        str(r["series"]), str(r["seq_len"]), str(r["status"]), format_seconds(r["latency_s"]) + mark, speed,
        format_bytes(r["peak_memory_bytes"]), format_ratio(r["memory_ratio"]), format_number(r["tflops"], ".3g"),
        format_error(r["rel_l2_error"], digits=2), format_error(_one_minus(r.get("cosine")), digits=2), "",
    ]


def _one_minus(cosine) -> float | None:
    """1 - cosine similarity, the error beside relative L2 (a cosine of 0.9999998 would print as 1.00); None if unmeasured."""
    return 1.0 - cosine if isinstance(cosine, (int, float)) else None
