"""The report's closing tables: every cell of the run, per setting and input distribution, failures with their reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from harness.report import analysis
from harness.report.columns import COLUMNS, NOISY_MARK
from harness.report.render import Block, Heading, Paragraph, Table, short_reason

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

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
    mixed = frame["device_name"].nunique() > 1  # several devices: name each cell's
    for setting in analysis.settings(frame):
        part = analysis.select(frame, setting)
        for dist in sorted({str(v) for v in part["inputs"]}):
            sub = part[part["inputs"] == dist].sort_values(["series", "seq_len"])
            rows = [cell_row(r) + ([str(r["device_name"])] if mixed else []) for _, r in sub.iterrows()]
            blocks += [
                Heading(3, f"{analysis.setting_title(setting)}, inputs {dist}"),
                Table(HEADERS + (["device"] if mixed else []), rows),
            ]
    if (frame["status"].eq("ok") & frame["noisy"].eq(True)).any():
        blocks.append(Paragraph(NOISY_FOOTNOTE))
    return blocks


def cell_row(r: pd.Series) -> list[str]:
    """One cell's line: numbers when it ran, its status and reason when not (OOM in capitals, to stand out)."""
    if r["status"] != "ok":
        status = "OOM" if r["status"] == "oom" else str(r["status"])
        return [str(r["series"]), str(r["seq_len"]), status] + ["-"] * len(COLUMNS) + [short_reason(r["reason"])]
    impossible = r.get("impossible")
    if isinstance(impossible, str):  # above the machine's measured limits: shown, flagged, never a winner
        return [str(r["series"]), str(r["seq_len"]), "IMPOSSIBLE"] + [c.text(r) for c in COLUMNS] + [impossible]
    return [str(r["series"]), str(r["seq_len"]), str(r["status"])] + [c.text(r) for c in COLUMNS] + [""]
