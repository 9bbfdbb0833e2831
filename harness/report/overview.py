"""How the run went: the report's opening sections (the environment, the devices of a mixed run, the spec, the outcome
counts, a load warning) and the terminal's outcome line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.measure.contention import CONTENDED_SHARE
from harness.measure.noise import HIGH_LOAD_PER_CPU, NOISY_SHARE
from harness.measure.roofline import PROCESSES_WIDE
from harness.report.analysis import not_run_rows
from harness.report.clock import contended_count, median_load
from harness.report.render import Block, Code, Heading, Paragraph, Table, format_number, format_text
from harness.schema import STATUSES
from harness.store import COL

if TYPE_CHECKING:
    from harness.report.analysed import AnalysedRun

# the outcome table's columns, then any other
STATUS_ORDER = (
    "ok",
    "oom",
    "unsupported",
    "error",
    "nonfinite",
    "timeout",
)


def environment(env: dict[str, Any], frame: pd.DataFrame) -> list[Block]:
    """Device, torch, CUDA, dtypes, threads, commit, Python, host and packages, from env.json and the rows."""
    device = env.get("gpu") or env.get("cpu") or "unknown"

    def column(name: str) -> str:
        return ", ".join(sorted({str(v) for v in frame[name] if v is not None})) if len(frame) else "-"

    rows = [
        ["device", f"{device}" + (f" (run rows: {column('device_name')})" if len(frame) else "")],
        ["torch", format_text(env.get("torch"))],
        ["CUDA", format_text(env.get("cuda"))],
        ["dtypes", column("dtype")],
        ["threads", f"torch {format_text(env.get('torch_threads'))} of {format_text(env.get('cpu_count'))} CPUs"],
        ["commit", format_text(env.get("git_commit"))],
        ["python", format_text(env.get("python"))],
        ["host", format_text(env.get("host"))],
    ]
    rows += limits_rows(env.get("limits"))
    packages = env.get("packages") or {}
    if packages:
        rows.append(["packages", ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v)])
    if not env:
        rows.append(["note", "env.json missing or unreadable"])
    return [Heading(2, "Environment"), Table(["", ""], rows)]


def limits_rows(limits: Any) -> list[list[str]]:
    """The machine's measured limits (env.json "limits"), each beside its datasheet figure where the GPU is known."""
    if not isinstance(limits, dict) or not isinstance(limits.get("dtypes"), dict):
        return []
    sheet = limits.get("datasheet") if isinstance(limits.get("datasheet"), dict) else {}
    entries = {dtype: e for dtype, e in sorted(limits["dtypes"].items()) if isinstance(e, dict)}

    def line(measured: Any, scale: float, unit: str, datasheet: Any) -> str:
        text = f"{format_number(_scaled(measured, scale), '.3g')} {unit} measured"
        return text + (f" (datasheet {sheet['name']}: {datasheet / scale:.4g} {unit})" if datasheet else "")

    rows = [
        [f"peak {dtype}", line(e.get("peak_flops"), 1e12, "TFLOP/s", (sheet.get("peak_flops") or {}).get(dtype))]
        for dtype, e in entries.items()
    ]
    if entries:
        first = next(iter(entries.values()))
        bandwidth = line(first.get("bandwidth_bytes_per_s"), 1e9, "GB/s", sheet.get("bandwidth_bytes_per_s"))
        rows.append(["bandwidth", bandwidth])
        rows.append(["limits", f"{format_text(first.get('method'))}; {format_text(first.get('measured_at'))}"])
    return rows


def _scaled(value: Any, scale: float) -> float | None:
    return value / scale if isinstance(value, (int, float)) else None


def load_warning(frame: pd.DataFrame) -> list[str]:
    """The report's first line when the run was measured under load or many rows are noisy (else nothing: a few
    noisy cells are marked where they are shown)."""
    if not len(frame) or COL.noisy not in frame:
        return []
    ok = frame[frame[COL.status] == "ok"]
    noisy = int(ok[COL.noisy].eq(True).sum())
    load = pd.to_numeric(frame[COL.load_per_cpu], errors="coerce")
    high = float(load.max()) if load.notna().any() else None
    if noisy < NOISY_SHARE * len(ok) and (high is None or high < HIGH_LOAD_PER_CPU):
        return []
    under = (
        f"measured under load (up to {high:.2f} per CPU; {HIGH_LOAD_PER_CPU} counts as loaded)"
        if high is not None and high >= HIGH_LOAD_PER_CPU
        else "measured with noisy timings"
    )
    between = int(ok[COL.noise_reason].fillna("").str.contains(PROCESSES_WIDE, regex=False).sum())
    if under == "measured with noisy timings" and between == noisy:  # quiet: the processes disagreed, nothing else
        return [
            f"The processes that timed this run disagreed on {noisy} of {len(ok)} timed cells, marked noisy († in "
            "the tables, hollow markers in the figures): their speed-up moved from one process to the next, so their "
            '95% intervals are wide; read the interval, not the median (docs/timing.md, "Timed in several processes").'
        ]
    contended, timed = contended_count(ok)
    trust = (
        f"{contended} of {timed} were contended (the machine took the cores away): pairing removes noise, not that "
        "bias, so their wall-time speed-ups can flip; compare CPU time (report --clock cpu) or rerun on a quiet machine"
        if contended
        else "Trust the paired speed-ups with their intervals over raw latencies"
    )
    return [
        f"This run was {under}: {noisy} of {len(ok)} timed cells are marked noisy († in the tables, hollow markers "
        f"in the figures). {trust}; docs/timing.md says how to get quiet numbers."
    ]


def devices(frame: pd.DataFrame) -> list[Block]:
    """Only when the run spans several devices (a Ray or Slurm sweep over mixed GPUs): cells per device and host."""
    if not len(frame) or frame[COL.device_name].nunique() < 2:
        return []
    rows = [
        [
            str(name),
            ", ".join(sorted({str(h) for h in part[COL.host]})),
            str(len(part)),
            str(int((part[COL.status] == "ok").sum())),
        ]
        for name, part in frame.groupby(COL.device_name, sort=True)
    ]
    note = (
        "This run's cells ran on different devices (see each table's device column). Latency, speed-up and memory "
        "ratios compare cells measured on different hardware; for a clean comparison run each device type as its own "
        "run (docs/scaling.md)."
    )
    return [Heading(2, "Devices"), Paragraph(note), Table(["device", "hosts", "cells", "ok"], rows)]


def spec(spec_text: str | None) -> list[Block]:
    """The report's appendix: the run's spec.toml as recorded (nothing when the folder has none)."""
    return [Heading(2, "Appendix: the spec"), Code(spec_text.strip())] if spec_text else []


NOT_RUN_WHY = "a shorter N of their series ran out of memory or time, or missed its budget"


def outcome(frame: pd.DataFrame) -> list[Block]:
    """Cells per series and status, with the totals in a sentence."""
    counts = frame.groupby([COL.series, COL.status]).size().unstack(fill_value=0)
    statuses = [s for s in STATUS_ORDER if s in counts.columns]
    statuses += [s for s in counts.columns if s not in statuses]
    rows = [[series] + [str(int(counts.at[series, s])) for s in statuses] for series in counts.index]
    total = f"{len(frame)} cells: " + ", ".join(f"{int(counts[s].sum())} {s}" for s in statuses)
    not_run = int(not_run_rows(frame).sum())
    if not_run:  # counted under their status; the terminal's outcome line counts them apart
        total += f" ({not_run} of them not run: {NOT_RUN_WHY})"
    return [Heading(2, "Outcome"), Paragraph(total)] + math_fallback(frame) + [Table(["series"] + statuses, rows)]


def math_fallback(frame: pd.DataFrame) -> list[Block]:
    """A warning line when any CUDA row's SDPA ran the math kernel: a silent fallback that costs speed and memory."""
    if COL.sdpa_kernel not in frame.columns:
        return []
    math = np.array([isinstance(k, str) and "math" in k.split("+") for k in frame[COL.sdpa_kernel]], dtype=bool)
    fell = frame[(frame[COL.device] == "cuda").to_numpy() & math]
    if not len(fell):
        return []
    where = ", ".join(sorted({f"{s} N={n}" for s, n in zip(fell[COL.series], fell[COL.seq_len])})[:6])
    more = f" and {len(fell) - 6} more" if len(fell) > 6 else ""
    return [
        Paragraph(
            f"**Warning: SDPA fell back to the math kernel on CUDA** in {len(fell)} row(s) ({where}{more}): "
            "torch found no fused kernel for that dtype, head dim or mask, so those latencies and memory are not "
            "the fused kernel's (see the sdpa_kernel column)."
        )
    ]


def outcome_line(analysed: "AnalysedRun") -> str:
    """How the run went, in one line: cells by status (those not run after a shorter N failed, apart), how many timed
    cells are noisy and contended, and the load they were measured under: 'cells: 62 ok, 14 timeout, 20 not run (...);
    29 of 29 timed cells noisy, 27 of 29 contended (...); load 14.2 per CPU (median of the cells; timings then follow
    the machine, not the code)'."""
    frame = analysed.frame
    if not len(frame):
        return "cells: none ran"
    not_run = not_run_rows(frame)
    counts = frame.loc[~not_run, COL.status].value_counts()
    order = [s for s in STATUSES if s in counts] + sorted(set(counts.index) - set(STATUSES))
    parts = [f"{counts[s]} {s}" for s in order]
    if not_run.any():
        parts.append(f"{int(not_run.sum())} not run ({NOT_RUN_WHY})")
    text = "cells: " + ", ".join(parts)
    noisy = frame[COL.noisy] if COL.noisy in frame else pd.Series(dtype=object)
    timed = noisy.notna()
    if timed.any():
        text += f"; {int(noisy[timed].astype(bool).sum())} of {int(timed.sum())} timed cells noisy"
    contended, known = contended_count(frame)
    if known:  # harness.measure.contention: the timing thread was off its core most of the time
        text += f"{',' if timed.any() else '; timed cells:'} {contended} of {known} contended "
        text += f"(on a core under {CONTENDED_SHARE:.0%} of their timed wall time)"
    median = median_load(frame)
    if median is not None:
        busy = median >= HIGH_LOAD_PER_CPU
        text += f"; load {median:.1f} per CPU (median of the cells{'; timings then follow the machine, not the code' if busy else ''})"
    return text
